#!/bin/sh
# PostgreSQL as the official image starts it: on an empty data directory, a cluster whose superuser is
# $POSTGRES_USER (password $POSTGRES_PASSWORD, scram over the network) and a database $POSTGRES_DB, in UTF-8 (the
# official image's default; psycopg hands back bytes from a SQL_ASCII database); then the server,
# listening on every address, as PID 1.
set -eu
bin=/usr/lib/postgresql/15/bin
data=/var/lib/postgresql/data
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$data" /var/run/postgresql
chown postgres:postgres "$data" /var/run/postgresql
if [ ! -s "$data/PG_VERSION" ]; then
    printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/pwfile
    chown postgres /tmp/pwfile
    as_postgres "$bin/initdb" -D "$data" -U "$POSTGRES_USER" --pwfile=/tmp/pwfile --encoding=UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f /tmp/pwfile
    echo "host all all all scram-sha-256" >> "$data/pg_hba.conf"
    as_postgres "$bin/pg_ctl" -D "$data" -o "-c listen_addresses=''" -w start >/dev/null
    as_postgres "$bin/psql" -U "$POSTGRES_USER" -d postgres -qc "CREATE DATABASE \"$POSTGRES_DB\""
    as_postgres "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups "$bin/postgres" -D "$data" -c listen_addresses='*'
