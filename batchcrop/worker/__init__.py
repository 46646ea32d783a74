"""The worker: claim-and-process slots, the reaper on a timer, heartbeats, graceful shutdown.

`worker` runs the slots; `processing` is one attempt (read, render, write, record the facts);
`attempts` ends an attempt in the database, fenced by its lease token; `facts` builds the
records written beside each derivative; `presence` keeps the worker's row in the registry.

May import `batches`, `callbacks`, `crop`, `db`, the lease engine (`leases`), the stores
(`storage`) and the floor (`errors`, `logs`, `metrics`, `settings`). Imported only by `app` and
the CLI, never by `batches` or the API.
"""
