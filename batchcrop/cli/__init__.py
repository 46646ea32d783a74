"""The command line: `batchcrop run|submit|worker|serve|status|...` (docs/operations.md).

`main` parses the arguments and hands one request to the layer below; `commands` runs each
command on the composition root (`batchcrop.app`), `reporting` prints tables and progress,
`startup` waits for a database that is still coming up, `exit_codes` names the exits.

May import everything below it: `api` (for `serve`), `app`, `worker`, `batches` and the floors
under them. Nothing imports the CLI. Heavy modules are imported inside the command that needs
them, so `batchcrop --help` loads none of them.
"""
