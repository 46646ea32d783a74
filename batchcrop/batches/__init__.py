"""Batches: what the CLI and the API share (docs/design.md §2, §7).

`service.BatchService` names every batch operation, each answered by one part on top of the
lease engine's groups: `submission` (the `BatchRequest` and creating a batch), `actions` (cancel,
requeue, redeliver), `reads` (status, items, events, listings), `retention` (prune) and `outbox`
(the completion callbacks' deliveries); `errors` holds their errors. `items` parses what a
submission names (folders, CSV rows, API bodies); `documents` builds the status, item and
manifest documents; `recrop` re-renders one item with an operator's box; `fleet` summarises the
worker registry.

May import `callbacks`, `crop` (the render request and its limits), `db`, `leases`, `storage`
and the floor (`errors`, `logs`, `metrics`, `settings`). Never imports the worker, the API or
the CLI.
"""
