"""A request's items kept as columns (`ItemList`): the same items, payloads and fingerprints as
one `ItemRequest` per item gave (ADR 0023)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batchcrop.batches import items as items_module
from batchcrop.batches.items import ItemList, ItemRequest, storable_text
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop.spec import RenderSpec

AWKWARD = [
    ItemRequest("/srv/a.jpg", "sku-1"),
    ItemRequest("/srv/ünï/çødé/🖼.jpg", None),
    ItemRequest('/srv/"quoted"\\back\tslash\n.jpg', 'ref "with" \\ and \u2028'),
    ItemRequest("s3://bucket/key.jpg", "sku-2", (1, 2, 30, 40)),
    ItemRequest("/srv/b.jpg", "", (0, 0, 1, 1)),
    ItemRequest("/srv/\x00\x1f.jpg", "\x7f"),
]


def _old_fingerprint(request: BatchRequest) -> str:
    """The fingerprint as it was computed before items were kept as columns: sha256 of the
    sorted-key JSON of the whole request, items as their `fingerprinted()` lists."""
    body: dict[str, Any] = {
        "items": [i.fingerprinted() for i in request.items],
        **request.spec.fingerprinted(),
        "deadline_seconds": request.deadline_seconds,
        "max_attempts": request.max_attempts,
    }
    if request.label is not None:
        body["label"] = request.label
    if request.callback_url is not None:
        body["notify_url"] = request.callback_url
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"label": "catalogue \u00e9t\u00e9 2026"},
        {"callback_url": "https://hooks.example.com/done?x=1"},
        {"label": "L", "callback_url": "http://10.0.0.1:8080/"},
    ],
)
def test_the_fingerprint_is_the_one_hashed_over_the_whole_request(extra: dict[str, Any]) -> None:
    """Whatever the items hold (non-ASCII, quotes, backslashes, control characters, no ref, an
    empty ref, focus boxes) and whichever optional fields are set, the fingerprint made from the
    columns is the one made from the whole request's JSON: idempotency keys in flight across the
    change keep matching."""
    for items in (AWKWARD, AWKWARD[:1], AWKWARD[3:4], list(reversed(AWKWARD))):
        request = BatchRequest(
            items=tuple(items),
            spec=RenderSpec.from_input({"ratios": ["4:3", "1:1"], "formats": ["webp", "jpeg"]}),
            deadline_seconds=3600.5,
            max_attempts=4,
            **extra,
        )
        assert _old_fingerprint(request) == request.fingerprint()


def test_payload_texts_are_the_json_of_each_payload() -> None:
    """Each payload text is exactly `json.dumps` of the item's payload (focus box only when
    set)."""
    items = ItemList.of(AWKWARD)
    assert [json.dumps(i.payload()) for i in AWKWARD] == list(items.payload_texts())


def test_an_item_list_reads_as_its_items() -> None:
    """Length, indexing (negative too), slicing, iteration, equality and concatenation give the
    `ItemRequest`s the list was made of, focus boxes at their items."""
    items = ItemList.of(AWKWARD)
    assert len(items) == len(AWKWARD)
    assert list(items) == AWKWARD
    assert [items[i] for i in range(-len(AWKWARD), len(AWKWARD))] == AWKWARD + AWKWARD
    assert list(items[2:5]) == AWKWARD[2:5]
    assert list(items[::-2]) == AWKWARD[::-2]
    assert list(items[1:3] + items[3:]) == AWKWARD[1:]
    assert items == ItemList.of(list(items))
    assert items != items[1:]
    assert ItemList.of(items) is items
    with pytest.raises(IndexError):
        items[len(AWKWARD)]


def test_a_request_keeps_its_items_as_columns() -> None:
    """A request made from a tuple of `ItemRequest`s holds an `ItemList` of them, equal to the
    one made from columns."""
    spec = RenderSpec.from_input({})
    from_tuple = BatchRequest(tuple(AWKWARD[:3]), spec, 60.0, 3)
    sources = [i.source for i in AWKWARD[:3]]
    from_columns = BatchRequest(ItemList(sources, [i.ref for i in AWKWARD[:3]]), spec, 60.0, 3)
    assert isinstance(from_tuple.items, ItemList)
    assert from_tuple == from_columns


_TEXTS = st.lists(
    st.text(alphabet=st.sampled_from(["a", "é", "🖼", "\u2028", "\x00", "\x1b", "\x85", "\udcff"])),
    max_size=8,
)


@given(sources=_TEXTS, refs=_TEXTS)
def test_the_bulk_check_finds_what_a_check_per_text_finds(
    sources: list[str], refs: list[str]
) -> None:
    """`unstorable` checks a whole column at once; it names the first item that the API's
    per-text rules (`storable_text`, the lengths, here shortened to 5) refuse, in the source
    column before the ref column of the same item."""
    refs = (refs + [""] * len(sources))[: len(sources)]
    expected = []
    for column, texts in (("source", sources), ("ref", refs)):
        for position, text in enumerate(texts):
            try:
                if len(text) > 5:
                    raise ValueError("is longer than 5 characters")
                storable_text(text)
            except ValueError as exc:
                expected.append((position, column, str(exc)))
                break
    items = ItemList(sources, [ref or None for ref in refs])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(items_module, "SOURCE_CHARS_MAX", 5)
        patch.setattr(items_module, "REF_CHARS_MAX", 5)
        assert items.unstorable() == min(expected, default=None)
