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
    # Single-user mode: no socket, nothing can connect before the role and database exist.
    postgres --single -D "$PGDATA" -j postgres > /dev/null <<SQL
CREATE ROLE "$user" LOGIN PASSWORD '$POSTGRES_PASSWORD';
CREATE DATABASE "$user" OWNER "$user";
SQL
fi

exec postgres -D "$PGDATA" -c listen_addresses='*'
