#!/usr/bin/env bash
# Source me: install Debian's PostgreSQL server if needed, start a throwaway cluster on 127.0.0.1 and
# export SAAG_OPT_TEST_POSTGRES_URL for tests/tune/test_postgres.py. The cluster (data dir in /tmp) is
# stopped and deleted when the sourcing shell exits. initdb refuses to run as root, so the cluster runs
# as the unprivileged `postgres` user the Debian package creates (or as the current user when not root).
# Sourced by .ci/run, whose `set -euo pipefail` makes any failing step below fail CI.

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
if [ -z "$(pg_bin)" ] || [ ! -x "$(pg_bin)/initdb" ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq postgresql >/dev/null
fi
PG_BIN="$(pg_bin)"

as_db_user() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

PG_DIR="$(mktemp -d /tmp/saag-opt-pg.XXXXXX)"
[ "$(id -u)" = 0 ] && chown postgres: "$PG_DIR"
PG_PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
as_db_user "$PG_BIN/initdb" -D "$PG_DIR/data" -U saag --auth=trust -E UTF8 >/dev/null
as_db_user "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_DIR -c max_connections=200" start >/dev/null
as_db_user "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U saag saag_opt_test

stop_postgres() {
    as_db_user "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$PG_DIR"
}
trap stop_postgres EXIT

export SAAG_OPT_TEST_POSTGRES_URL="postgresql://saag@127.0.0.1:$PG_PORT/saag_opt_test"
echo "PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PG_PORT (throwaway, $PG_DIR)"
