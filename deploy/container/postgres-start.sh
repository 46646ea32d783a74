#!/bin/sh
# PostgreSQL in the `postgres` image (deploy/container/Containerfile). On the first start
# (an empty $PGDATA volume) it creates the cluster, a role and a database both named
# $POSTGRES_USER (default batchcrop) with the password $POSTGRES_PASSWORD, and allows password
# (SCRAM) logins over TCP; then, every start, it runs the server in the foreground.
set -eu
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
user="${POSTGRES_USER:-batchcrop}"
case "$user$POSTGRES_PASSWORD" in
    *"'"* | *'"'* | *'\'*) echo "postgres-start: quotes and backslashes are not allowed in POSTGRES_USER or POSTGRES_PASSWORD" >&2; exit 2 ;;
esac

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    superuser_password="$(mktemp)"
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$superuser_password"
    initdb --pgdata="$PGDATA" --username=postgres --pwfile="$superuser_password" \
        --auth-local=peer --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8
    rm -f "$superuser_password"
    printf '%s\n' "host all all 0.0.0.0/0 scram-sha-256" "host all all ::/0 scram-sha-256" \
        >> "$PGDATA/pg_hba.conf"
    # Single-user mode (one statement per line): no socket, nothing can connect before the
    # role and database exist. Failed statements are not logged with their text (the password).
    errors="$(postgres --single -D "$PGDATA" -c log_min_error_statement=panic postgres 2>&1 > /dev/null <<SQL
CREATE ROLE "$user" LOGIN PASSWORD '$POSTGRES_PASSWORD';
CREATE DATABASE "$user" OWNER "$user";
SQL
)"
    if printf '%s\n' "$errors" | grep -q 'ERROR'; then
        printf '%s\n' "$errors" >&2
        rm -rf "${PGDATA:?}"/*
        echo "postgres-start: creating the role and database failed; the cluster was removed" >&2
        exit 1
    fi
fi

exec postgres -D "$PGDATA" -c listen_addresses='*'
