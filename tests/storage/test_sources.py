"""SourceReader: expansion, normalisation, reading and confinement, local and on S3 (moto)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from storage import (
    ObjectNotFound,
    ObjectTooLarge,
    S3Settings,
    S3Store,
    SourceNotAllowed,
    SourceReader,
)
from storage.sources import FOLDER_LISTING_AFTER

# What the tests ask a folder to expand to (the application passes its image suffixes).
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".tif", ".tiff", ".bmp"})
LOCAL_TREE = {
    "a.jpg": b"a",
    "B.PNG": b"b",
    "notes.txt": b"not an image",
    ".hidden.jpg": b"dot-file",
    ".cache/c.jpg": b"dot-folder",
    "sub/c.webp": b"c",
    "sub/deeper/e.TIFF": b"e",
    "sub/deeper/f.Bmp": b"f",
}
S3_TREE = {
    "photos/a.jpg": b"a",
    "photos/sub/b.PNG": b"b",
    "photos/.hidden/c.jpg": b"dot-folder",
    "photos/.d.jpg": b"dot-file",
    "photos/readme.txt": b"text",
    "photos/marker/": b"",
    "photos-other/x.jpg": b"sibling prefix",
}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A folder of sources with images, non-images, dot-files and dot-folders."""
    root = tmp_path / "sources"
    for name, data in LOCAL_TREE.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


@pytest.fixture
def s3_sources(moto_s3: S3Store) -> str:
    """A moto bucket holding `S3_TREE`; returns the bucket name."""
    for key, data in S3_TREE.items():
        moto_s3.client.put_object(Bucket=moto_s3.bucket, Key=key, Body=data)
    return moto_s3.bucket


def test_without_suffixes_a_folder_expands_to_every_visible_file(tree: Path) -> None:
    """The reader itself knows no file types: with no suffixes every non-dot file is a source."""
    visible = sorted(
        str(tree / name)
        for name in LOCAL_TREE
        if not any(p.startswith(".") for p in name.split("/"))
    )
    assert visible == SourceReader().expand(str(tree))


def test_expand_local_folder(tree: Path) -> None:
    """A folder expands recursively to its images in any case, without dot entries, sorted."""
    expected = [
        str(tree / name)
        for name in ("B.PNG", "a.jpg", "sub/c.webp", "sub/deeper/e.TIFF", "sub/deeper/f.Bmp")
    ]
    assert expected == SourceReader(suffixes=IMAGE_SUFFIXES).expand(str(tree))


def test_expand_named_file_is_one_item(tree: Path) -> None:
    """A file named explicitly is one item whatever its extension or dot."""
    reader = SourceReader(suffixes=IMAGE_SUFFIXES)
    assert [str(tree / "notes.txt")] == reader.expand(str(tree / "notes.txt"))
    assert [str(tree / ".hidden.jpg")] == reader.expand(str(tree / ".hidden.jpg"))


def test_expand_missing_is_not_found(tmp_path: Path) -> None:
    """A source that does not exist raises ObjectNotFound."""
    with pytest.raises(ObjectNotFound):
        SourceReader(suffixes=IMAGE_SUFFIXES).expand(str(tmp_path / "nope"))


def test_reading_a_folder_says_it_is_a_folder(tmp_path: Path) -> None:
    """A folder given where a file is read (an API item, a CSV row) is not found as a file, and
    the message says why rather than "not found"."""
    with pytest.raises(ObjectNotFound, match=f"source is a folder, not a file: {tmp_path}$"):
        SourceReader(suffixes=IMAGE_SUFFIXES).read(str(tmp_path), max_bytes=1 << 20)
    with pytest.raises(ObjectNotFound, match="source not found: "):
        SourceReader(suffixes=IMAGE_SUFFIXES).read(str(tmp_path / "nope"), max_bytes=1 << 20)


def test_normalize_resolves_relative_and_symlinks(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Relative paths become absolute and symlinks are resolved."""
    monkeypatch.chdir(tree)
    (tree / "alias.jpg").symlink_to(tree / "a.jpg")
    reader = SourceReader(suffixes=IMAGE_SUFFIXES)
    assert str(tree / "a.jpg") == reader.normalize("sub/../a.jpg")
    assert str(tree / "a.jpg") == reader.normalize("alias.jpg")


def test_roots_confine_local_sources(tree: Path, tmp_path: Path) -> None:
    """With roots, sources outside them (also via .. or a symlink) raise SourceNotAllowed."""
    outside = tmp_path / "outside.jpg"
    outside.write_bytes(b"x")
    sibling = tmp_path / "sources-private"
    sibling.mkdir()
    (tree / "escape.jpg").symlink_to(outside)
    reader = SourceReader([str(tree)], suffixes=IMAGE_SUFFIXES)
    assert str(tree / "a.jpg") == reader.normalize(str(tree / "a.jpg"))
    for source in (str(outside), f"{tree}/../outside.jpg", str(tree / "escape.jpg"), str(sibling)):
        with pytest.raises(SourceNotAllowed):
            reader.read(source, max_bytes=100)
    assert str(tree / "escape.jpg") not in [*reader.expand(str(tree))]


def test_empty_roots_allow_nothing(tree: Path) -> None:
    """roots=[] (the API default) refuses every source."""
    with pytest.raises(SourceNotAllowed):
        SourceReader([], suffixes=IMAGE_SUFFIXES).read(str(tree / "a.jpg"), max_bytes=100)


@pytest.mark.parametrize(
    "source",
    ["https://example.com/a.jpg", "file:///srv/a.jpg", "file://srv/a.jpg", "FILE:///a.jpg"],
)
def test_unsupported_scheme_is_refused(source: str) -> None:
    """URLs other than s3:// are not sources, file:// included: a local source is a plain
    path (docs/design.md §5)."""
    with pytest.raises(SourceNotAllowed, match="unsupported source scheme"):
        SourceReader(suffixes=IMAGE_SUFFIXES).normalize(source)


def test_read_local(tree: Path) -> None:
    """read returns the bytes, refuses larger files and reports missing ones and folders."""
    reader = SourceReader(suffixes=IMAGE_SUFFIXES)
    assert reader.read(str(tree / "a.jpg"), max_bytes=1) == b"a"
    with pytest.raises(ObjectTooLarge):
        reader.read(str(tree / "notes.txt"), max_bytes=3)
    with pytest.raises(ObjectNotFound):
        reader.read(str(tree / "missing.jpg"), max_bytes=10)
    with pytest.raises(ObjectNotFound):
        reader.read(str(tree / "sub"), max_bytes=10)


def test_expand_s3_prefix(s3_sources: str) -> None:
    """An s3 prefix expands to its images, skipping dot entries, markers and sibling prefixes."""
    reader = SourceReader(s3=S3Settings(region="us-east-1"), suffixes=IMAGE_SUFFIXES)
    expected = [f"s3://{s3_sources}/photos/a.jpg", f"s3://{s3_sources}/photos/sub/b.PNG"]
    assert expected == reader.expand(f"s3://{s3_sources}/photos")
    assert expected == reader.expand(f"s3://{s3_sources}/photos/")


def test_expand_s3_named_object_and_missing(s3_sources: str) -> None:
    """A named s3 object is one item; a prefix with no object raises ObjectNotFound."""
    reader = SourceReader(s3=S3Settings(region="us-east-1"), suffixes=IMAGE_SUFFIXES)
    named = f"s3://{s3_sources}/photos/readme.txt"
    assert [named] == reader.expand(named)
    with pytest.raises(ObjectNotFound):
        reader.expand(f"s3://{s3_sources}/missing")


def test_read_s3(s3_sources: str) -> None:
    """read fetches s3 objects and enforces max_bytes and existence."""
    reader = SourceReader(s3=S3Settings(region="us-east-1"), suffixes=IMAGE_SUFFIXES)
    assert reader.read(f"s3://{s3_sources}/photos/a.jpg", max_bytes=1) == b"a"
    with pytest.raises(ObjectTooLarge):
        reader.read(f"s3://{s3_sources}/photos/readme.txt", max_bytes=3)
    with pytest.raises(ObjectNotFound):
        reader.read(f"s3://{s3_sources}/photos/nope.jpg", max_bytes=3)


def test_roots_confine_s3_sources(s3_sources: str) -> None:
    """An s3 root allows its own prefix only: not siblings, other buckets or dot segments."""
    reader = SourceReader(
        [f"s3://{s3_sources}/photos"], s3=S3Settings(region="us-east-1"), suffixes=IMAGE_SUFFIXES
    )
    allowed = f"s3://{s3_sources}/photos/a.jpg"
    assert allowed == reader.normalize(allowed)
    refused = [
        f"s3://{s3_sources}/photos-other/x.jpg",
        "s3://another-bucket/photos/a.jpg",
        f"s3://{s3_sources}/photos/../photos-other/x.jpg",
        f"s3://{s3_sources}",
        "s3:///photos/a.jpg",
    ]
    for source in refused:
        with pytest.raises(SourceNotAllowed):
            reader.read(source, max_bytes=100)


def test_mixed_roots(tree: Path, s3_sources: str) -> None:
    """Local and s3 roots can be combined; each confines its own kind of source."""
    reader = SourceReader(
        [str(tree), f"s3://{s3_sources}"],
        s3=S3Settings(region="us-east-1"),
        suffixes=IMAGE_SUFFIXES,
    )
    assert reader.read(str(tree / "a.jpg"), max_bytes=10) == b"a"
    assert reader.read(f"s3://{s3_sources}/photos/a.jpg", max_bytes=10) == b"a"


def test_a_symlink_loop_is_refused_and_skipped(tree: Path) -> None:
    """A symlink loop named directly is `SourceNotAllowed` (a usage error, never a crash); in a
    folder it is skipped like any entry that is not a readable image."""
    (tree / "loop-a.jpg").symlink_to(tree / "loop-b.jpg")
    (tree / "loop-b.jpg").symlink_to(tree / "loop-a.jpg")
    reader = SourceReader(suffixes=IMAGE_SUFFIXES)
    with pytest.raises(SourceNotAllowed, match="symlink loop"):
        reader.normalize(str(tree / "loop-a.jpg"))
    with pytest.raises(SourceNotAllowed, match="symlink loop"):
        reader.read(str(tree / "loop-a.jpg"), max_bytes=100)
    assert not any(Path(source).name.startswith("loop-") for source in reader.expand(str(tree)))


def test_a_fifo_is_refused_without_blocking(tree: Path) -> None:
    """A FIFO (which an open for reading would wait on until a writer came) is refused by type,
    named directly or met in a folder, and nothing waits on it."""
    os.mkfifo(tree / "pipe.jpg")
    reader = SourceReader(suffixes=IMAGE_SUFFIXES)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            reader.read(str(tree / "pipe.jpg"), max_bytes=100)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "reading a FIFO blocked"
    assert [SourceNotAllowed] == [type(e) for e in outcome]
    with pytest.raises(SourceNotAllowed, match="not a regular file"):
        reader.normalize(str(tree / "pipe.jpg"))
    assert not any(Path(s).name == "pipe.jpg" for s in reader.expand(str(tree)))


def _answer(normalize: object, source: str) -> tuple[str, str]:
    """What a normaliser says about `source`: ("ok", path) or ("refused", its message)."""
    try:
        return ("ok", normalize(source))  # type: ignore[operator]
    except SourceNotAllowed as exc:
        return ("refused", str(exc))


def test_the_normalizer_of_a_request_answers_as_normalize(tree: Path, tmp_path: Path) -> None:
    """Over links to folders and files (inside and outside the roots), `..`, missing files,
    a FIFO, a symlink loop, relative paths and other schemes, the one-request normaliser (which
    resolves each folder once) gives `normalize`'s every answer and error."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "o.jpg").write_bytes(b"o")
    (tree / "to-outside").symlink_to(outside)
    (tree / "sub" / "to-sub").symlink_to(tree / "sub" / "deeper")
    (tree / "link.jpg").symlink_to(tree / "a.jpg")
    (tree / "escape.jpg").symlink_to(outside / "o.jpg")
    (tree / "loop").symlink_to(tree / "loop")
    os.mkfifo(tree / "pipe.jpg")
    sources = [
        str(tree / "a.jpg"),
        f"file://{tree / 'a.jpg'}",
        str(tree / "sub" / ".." / "a.jpg"),
        str(tree / "sub" / "to-sub" / "e.TIFF"),
        str(tree / "to-outside" / "o.jpg"),
        str(tree / "link.jpg"),
        str(tree / "escape.jpg"),
        str(tree / "missing.jpg"),
        str(tree / "missing-folder" / "x.jpg"),
        str(tree / "loop" / "x.jpg"),
        str(tree / "pipe.jpg"),
        str(tree / "sub"),
        str(tree / "sub") + "/",
        str(tree / "sub" / ".."),
        str(outside / "o.jpg"),
        "relative/a.jpg",
        "",
        "file://",
        "s3://bucket/key.jpg",
        "http://example.com/a.jpg",
        "/nul\0.jpg",
    ]
    for roots in (None, [str(tree)], [str(tree / "sub")], [str(tree), str(outside)]):
        reader = SourceReader(roots)
        normalize = reader.normalizer()
        # Asked often enough that every folder is listed (the answers from a listing), and
        # asked before that too (one lookup per source).
        for _ in range(FOLDER_LISTING_AFTER + 2):
            for source in sources:
                answer = _answer(normalize, source)
                assert answer == _answer(reader.normalize, source), (roots, source)


def test_a_listed_folder_still_finds_what_appears_after_its_listing(tree: Path) -> None:
    """A file made after the normaliser listed its folder is looked up, not taken as missing:
    a symlink made then is still resolved, and a FIFO still refused."""
    reader = SourceReader(None)
    normalize = reader.normalizer()
    for _ in range(FOLDER_LISTING_AFTER):
        assert normalize(str(tree / "a.jpg")) == str(tree / "a.jpg")
    (tree / "late-link.jpg").symlink_to(tree / "a.jpg")
    os.mkfifo(tree / "late-pipe.jpg")
    assert normalize(str(tree / "late-link.jpg")) == str(tree / "a.jpg")
    with pytest.raises(SourceNotAllowed, match="not a regular file"):
        normalize(str(tree / "late-pipe.jpg"))


class _SwappedAfterTheCheck(SourceReader):
    """A reader whose source changes between its check and its open, as another process with
    write access under a root could change it: `swap` runs once the path has been normalised."""

    def __init__(self, roots: list[str], swap: Callable[[], None]) -> None:
        super().__init__(roots)
        self.swap = swap

    def normalize(self, source: str) -> str:
        normalized = super().normalize(source)
        self.swap()
        return normalized


def test_a_folder_swapped_for_a_symlink_after_the_check_is_not_read(tmp_path: Path) -> None:
    """A folder on the source's path replaced by a symlink to a folder outside the roots, after
    the path was checked and before it is opened: the file opened there is refused, never read
    (the kernel's name of the opened file is checked against the roots)."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "uploads").mkdir(parents=True)
    (root / "uploads" / "a.jpg").write_bytes(b"inside")
    outside.mkdir()
    (outside / "a.jpg").write_bytes(b"secret")

    def swap() -> None:
        (root / "uploads").rename(root / "before")
        (root / "uploads").symlink_to(outside)

    reader = _SwappedAfterTheCheck([str(root)], swap)
    with pytest.raises(SourceNotAllowed, match="outside the allowed roots"):
        reader.read(str(root / "uploads" / "a.jpg"), max_bytes=100)


def test_a_file_swapped_for_a_symlink_after_the_check_is_not_read(tmp_path: Path) -> None:
    """The source file itself replaced by a symlink after the check is not followed: it is a
    missing source (`ObjectNotFound`), even where the link points inside the roots."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.jpg").write_bytes(b"inside")
    (root / "b.jpg").write_bytes(b"other")

    def swap() -> None:
        (root / "a.jpg").unlink()
        (root / "a.jpg").symlink_to(root / "b.jpg")

    reader = _SwappedAfterTheCheck([str(root)], swap)
    with pytest.raises(ObjectNotFound, match="became a symlink"):
        reader.read(str(root / "a.jpg"), max_bytes=100)
