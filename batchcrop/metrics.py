"""Prometheus metrics (docs/design.md §7): one registry per process, built by the composition
root."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

ITEM_DURATION_BUCKETS_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class Metrics:
    """The counters and histogram operators alert on; safe to share between threads."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.claims = Counter(
            "batchcrop_claims", "Items claimed by workers.", registry=self.registry
        )
        self.commits = Counter(
            "batchcrop_commits", "Items committed as succeeded.", registry=self.registry
        )
        self.lease_expirations = Counter(
            "batchcrop_lease_expirations",
            "Expired leases the reaper turned into retryable or failed items.",
            registry=self.registry,
        )
        self.retryable_failures = Counter(
            "batchcrop_retryable_failures",
            "Attempts that ended retryable, by error category.",
            ["category"],
            registry=self.registry,
        )
        self.terminal_failures = Counter(
            "batchcrop_terminal_failures",
            "Items that ended failed or abandoned, by error category.",
            ["category"],
            registry=self.registry,
        )
        self.lease_lost = Counter(
            "batchcrop_lease_lost",
            "Attempts dropped because their lease was lost (nothing written).",
            registry=self.registry,
        )
        self.derivative_bytes_differ = Counter(
            "batchcrop_derivative_bytes_differ",
            "Derivative writes that found their key holding other bytes of the same derivative "
            "(same source, ratio and variant: another CPU's rounding); the stored one stands.",
            registry=self.registry,
        )
        self.polls_not_modified = Counter(
            "batchcrop_poll_not_modified",
            "Status polls answered 304 Not Modified.",
            registry=self.registry,
        )
        self.item_duration = Histogram(
            "batchcrop_item_duration_seconds",
            "Wall time of one attempt, claim to final transition.",
            ["outcome"],
            buckets=ITEM_DURATION_BUCKETS_SECONDS,
            registry=self.registry,
        )

    def render(self) -> bytes:
        """The Prometheus text exposition of this registry."""
        return generate_latest(self.registry)
