"""Which run of `scripts/check` (or `.ci/run`) started a service, so that run stops only its own.

The check scripts export `BATCHCROP_TEST_SERVICES_RUN` (a fresh id per run) to every process they
start; a service started while it is set writes the id into its folder before its first daemon
starts (so one cut off mid-start is still claimed). At the end the script runs
`python -m tests.services down --run ID`, which stops only the services holding that id: one that
was already running (a developer's `up`, a run kept with `--keep-services`) holds another id or
none and keeps running.
"""

from __future__ import annotations

import os
from pathlib import Path

RUN_ENV = "BATCHCROP_TEST_SERVICES_RUN"
MARKER_NAME = "started-by-run"
# `.tmp/checkouts/*/`: copies of this tooling that its own tests run as other checkouts; they pass
# the run id on, so `down --run` also stops what an interrupted test left running there.
SCRATCH_CHECKOUTS = "checkouts"


def mark_started(root: Path) -> None:
    """Record in `root` which run is starting the service there (none: started by hand)."""
    run = os.environ.get(RUN_ENV, "").strip()
    marker = root / MARKER_NAME
    if run:
        marker.write_text(run + "\n")
    else:
        marker.unlink(missing_ok=True)


def started_by(root: Path, run: str) -> bool:
    """True when the service in `root` was last started by run `run`."""
    try:
        return (root / MARKER_NAME).read_text().strip() == run
    except OSError:
        return False
