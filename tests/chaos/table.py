"""The one table a chaos run prints (plain text, Markdown-compatible)."""

from __future__ import annotations

from collections import Counter

from tests.chaos.harness import Report
from tests.chaos.recovery import summary


def _answers(answers: dict[int, int]) -> str:
    return ", ".join(f"{code}: {n}" for code, n in sorted(answers.items())) or "none"


def _recovery_rows(report: Report) -> list[tuple[str, str]]:
    found = report.recoveries
    reasons = Counter(r.reason or "never" for r in found)
    return [
        (
            "items held by SIGKILLed workers (bounded)",
            f"{len(found)} ({report.recoveries_bounded}; "
            + ", ".join(f"{k}: {n}" for k, n in sorted(reasons.items()))
            + ")",
        ),
        (
            "SIGKILL to release",
            f"{summary(r.released for r in found)}; bound {report.release_bound:.1f} s",
        ),
        (
            "SIGKILL to next claim",
            f"{summary(r.reclaimed for r in found)}; bound {report.reclaim_bound:.1f} s",
        ),
    ]


def render(report: Report) -> str:
    """Items, faults by kind, reclaims, retries, outcomes, violations, wall time, throughput."""
    audit = report.audit
    faults = sum(n for kind, n in report.faults.items() if kind != "worker_restart")
    s3_faults = sum(
        n
        for kind, n in report.faults.items()
        if kind.startswith("s3_") and kind not in ("s3_delay",)
    )
    share = s3_faults / report.storage_requests if report.storage_requests else 0.0
    rows: list[tuple[str, str]] = [("items", str(report.items))]
    rows += [(f"fault: {kind}", str(n)) for kind, n in sorted(report.faults.items())]
    rows += [
        ("faults injected (all kinds)", str(faults)),
        ("S3 requests through the proxy", str(report.storage_requests)),
        ("S3 requests failed or reset", f"{s3_faults} ({share:.1%})"),
        ("reclaims (expired, worker lost, not in flight)", str(audit.reclaims)),
        ("retries (moves to retryable)", str(audit.retries)),
    ]
    rows += [(f"outcome: {k}", str(n)) for k, n in sorted(audit.outcomes.items())]
    rows += [
        (f"batch {name}", f"{doc['state']} {doc['failures'] or ''}".strip())
        for name, doc in report.batches.items()
    ]
    rows += [
        ("objects in store (orphans)", f"{audit.objects} ({audit.orphans})"),
        (
            "callbacks processed (requests, duplicates dropped)",
            f"{audit.callbacks} ({audit.callback_requests}, {audit.callback_duplicates})",
        ),
        ("manifest rows", str(audit.manifest_rows)),
        *_recovery_rows(report),
        (
            "database / long store outages (lasted)",
            ", ".join(f"{kind} ({lasted:g} s)" for kind, lasted in report.outages) or "none",
        ),
        ("items stranded after an outage", str(report.stranded)),
        ("main items failed by an outage", str(report.failed_by_outage)),
        ("API status answers", _answers(report.api_answers)),
        ("violations", str(len(report.violations))),
        ("wall time", f"{report.wall_seconds:.0f} s"),
        ("throughput (working phase)", f"{report.throughput:.1f} items/s"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"| {'measure'.ljust(width)} | value |", f"|{'-' * (width + 2)}|-------|"]
    lines += [f"| {k.ljust(width)} | {v} |" for k, v in rows]
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)
