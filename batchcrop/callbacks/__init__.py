"""Completion callbacks: the outbox, who may be called, signed deliveries (ADR 0013, 0016;
the words callback, delivery and attempt: docs/design.md §7, callbacks).

`delivery` checks a callback URL and signs a callback; `deliverer` claims due deliveries and
sends them, several at once, paced per destination by `pacing` (ADR 0034); `hosts` decides
which addresses a callback may reach; `transport` makes the HTTP request that never follows a
redirect.

May import `db` (the outbox's statements), `leases` and the floor (`errors`, `logs`,
`metrics`). Never imports `batches`, the worker, the API or the CLI.
"""
