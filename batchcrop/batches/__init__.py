"""Batches: what the CLI and the API share (docs/design.md §2, §7).

`service` submits batches, answers reads, takes operator actions and runs retention on top of
the lease engine's groups; `items` parses what a submission names (folders, CSV rows, API
bodies); `documents` builds the status, item and manifest documents; `recrop` re-renders one
item with an operator's box; `fleet` summarises the worker registry.

May import `callbacks`, `crop` (the render request and its limits), `db`, `leases`, `storage`
and the floor (`errors`, `logs`, `metrics`, `settings`). Never imports the worker, the API or
the CLI.
"""
