"""The operator's papercuts, through the real CLI: listings, pages, flag messages, the status
table, and what a pruned batch says (docs/design.md §7, CLI)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.cli.test_cli import Cli, cli
from tests.images import write_photos

__all__ = ["cli"]  # fixture

pytestmark = pytest.mark.slow
sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@sqlite_only
def test_batches_refuses_an_item_state_and_an_empty_listing_says_so(cli: Cli) -> None:
    """`batches --state retryable` is a usage error naming the item state; an empty listing
    prints "no batches", not a header squeezed over nothing."""
    refused = cli("batches", "--state", "retryable")
    assert refused.returncode == 2
    assert "retryable is an item state" in refused.stderr
    assert cli("db", "upgrade").returncode == 0
    empty = cli("batches")
    assert (empty.returncode, empty.stdout.strip()) == (0, "no batches")


@sqlite_only
@pytest.mark.parametrize("deadline", ["0s", "-5m", "31d"])
def test_a_deadline_out_of_bounds_names_its_own_limit(cli: Cli, deadline: str) -> None:
    """`--deadline 0s`, `-5m` and `31d` say the deadline's limit (30 days), never argparse's
    "expected one argument" or the 10 years of other durations."""
    result = cli("submit", ".", "--deadline", deadline)
    assert result.returncode == 2
    assert "the deadline must be positive and at most 30 days" in result.stderr, result.stderr


@sqlite_only
def test_items_prints_one_page_with_limit_and_goes_on_with_cursor(cli: Cli, tmp_path: Path) -> None:
    """`items --limit 2` prints two items and the next cursor; `--cursor` gives the rest."""
    write_photos(tmp_path / "src", 3)
    batch = cli("submit", str(tmp_path / "src")).stdout.strip()
    first = cli.json("items", batch, "--limit", "2")
    assert len(first["items"]) == 2
    assert first["next_cursor"] is not None
    rest = cli.json("items", batch, "--limit", "2", "--cursor", first["next_cursor"])
    assert (len(rest["items"]), rest["next_cursor"]) == (1, None)
    human = cli("items", batch, "--limit", "1")
    assert f"--cursor {cli.json('items', batch, '--limit', '1')['next_cursor']}" in human.stderr
    assert cli("items", batch, "--limit", "0").returncode == 2


@sqlite_only
def test_status_shows_the_render_request(cli: Cli, tmp_path: Path) -> None:
    """The status table names the formats, the max side and the quality beside the ratios."""
    write_photos(tmp_path / "src", 1)
    batch = cli(
        "submit", str(tmp_path / "src"), "--formats", "jpeg,webp", "--max-side", "640",
        "--quality", "77",
    ).stdout.strip()  # fmt: skip
    shown = cli("status", batch).stdout
    assert "jpeg, webp" in shown
    assert "640 px" in shown
    assert "77" in shown


def test_prune_dry_run_lists_and_a_pruned_batch_says_it_was_pruned(
    cli: Cli, tmp_path: Path
) -> None:
    """`prune --dry-run` lists the batch it would delete and deletes nothing; after the prune
    `status` exits 5 saying the batch was pruned, while an unknown id still reads "no batch"."""
    write_photos(tmp_path / "src", 1)
    done = cli("run", str(tmp_path / "src"), "--out", str(tmp_path / "d"), "--json")
    assert done.returncode == 0, done.stderr
    batch = json.loads(done.stdout)["id"]
    time.sleep(1.2)
    dry = cli("prune", "--finished-before", "1s", "--dry-run")
    assert (dry.returncode, dry.stdout.split()) == (0, [batch])
    assert "would prune 1 batches (nothing deleted)" in dry.stderr
    assert cli("status", batch).returncode == 0
    assert cli("prune", "--finished-before", "1s").returncode == 0
    gone = cli("status", batch)
    assert gone.returncode == 5
    assert f"batch {batch} was pruned at 20" in gone.stderr
    unknown = cli("status", "0" * 8 + batch[8:])
    assert (unknown.returncode, "was pruned" in unknown.stderr) == (5, False)
