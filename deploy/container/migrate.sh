#!/bin/sh
# The compose file's deploy step (docs/adr/0015-migrations-are-a-deploy-step.md): wait until
# the database answers — `batchcrop db check` exits 3 while it cannot be reached — for up to
# $BATCHCROP_MIGRATE_WAIT_SECONDS (default 60), then run `batchcrop db upgrade` and exit with
# its status. A database that never answers ends with db upgrade's own error (exit 3).
set -u
wait_seconds="${BATCHCROP_MIGRATE_WAIT_SECONDS:-60}"
waited=0
while [ "$waited" -lt "$wait_seconds" ]; do
    batchcrop db check > /dev/null 2>&1
    [ $? -ne 3 ] && break
    sleep 1
    waited=$((waited + 1))
done
exec batchcrop db upgrade
