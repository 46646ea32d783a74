"""Completion callbacks: the outbox, who may be called, signed deliveries (ADR 0013, 0016).

`delivery` claims due callbacks and sends them; `hosts` decides which addresses a callback may
reach; `transport` makes the HTTP request that never follows a redirect.

May import `db` (the outbox's statements), `leases` and the floor (`errors`, `logs`,
`metrics`). Never imports `batches`, the worker, the API or the CLI.
"""
