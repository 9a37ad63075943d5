#!/usr/bin/env bash
# Start a throw-away PostgreSQL server for the storage index tests and print its URL.
#
# Usage (as root, Debian 12):   eval "$(bash scripts/start_postgres.sh)"
# stdout gets exactly one line:  TLM_TEST_PG_URL=postgresql+psycopg2://postgres:<pw>@127.0.0.1:<port>/tlm_test
# Everything else goes to stderr. Installs Debian's `postgresql` package if its server binaries
# are absent (a hand-installed server elsewhere, e.g. /usr/local/bin, is never used), creates a
# fresh cluster in a temp dir owned by the postgres user, listens on 127.0.0.1 only, on a free
# port, with a random password. Re-running while that server is alive reprints the same line;
# if it died, a new one is started. Stop it with: runuser -u postgres -- <bin>/pg_ctl -D <dir>/data stop
# (the state file named below records <bin> and <dir>).
set -euo pipefail
exec 3>&1 1>&2  # fd 3 = the real stdout, for the single result line

STATE_FILE=${TLM_PG_STATE:-/tmp/tlm-test-postgres.env}

find_bin() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

PGBIN=$(find_bin)
if [[ -z "$PGBIN" || ! -x "$PGBIN/initdb" ]]; then
  echo "start_postgres: installing Debian's postgresql package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q postgresql
  PGBIN=$(find_bin)
fi
if [[ -z "$PGBIN" || ! -x "$PGBIN/initdb" ]]; then
  echo "start_postgres: no initdb under /usr/lib/postgresql/*/bin after installing" >&2
  exit 1
fi
id postgres >/dev/null 2>&1 || { echo "start_postgres: no 'postgres' user (package install incomplete?)" >&2; exit 1; }

as_pg() { runuser -u postgres -- "$@"; }

# Reuse a server started earlier by this script if it is still alive.
if [[ -f "$STATE_FILE" ]]; then
  # shellcheck disable=SC1090
  . "$STATE_FILE"
  if [[ -n "${PG_DIR:-}" && -d "$PG_DIR/data" ]] && as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" status >/dev/null 2>&1; then
    echo "start_postgres: reusing server in $PG_DIR on port $PG_PORT" >&2
    echo "TLM_TEST_PG_URL=postgresql+psycopg2://postgres:${PG_PASSWORD}@127.0.0.1:${PG_PORT}/tlm_test" >&3
    exit 0
  fi
  echo "start_postgres: previous server ($STATE_FILE) is gone; starting a new one" >&2
fi

PY=$(command -v python3 || true)
[[ -n "$PY" ]] || { echo "start_postgres: python3 is needed to find a free port" >&2; exit 1; }
PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
PASSWORD=$("$PY" -c 'import secrets; print(secrets.token_hex(16))')
DIR=$(mktemp -d /tmp/tlm-pg.XXXXXX)
chown postgres:postgres "$DIR"
chmod 700 "$DIR"
printf '%s\n' "$PASSWORD" > "$DIR/pwfile"
chown postgres:postgres "$DIR/pwfile"

as_pg "$PGBIN/initdb" -D "$DIR/data" -U postgres --pwfile="$DIR/pwfile" \
  --auth-host=scram-sha-256 --auth-local=peer -E UTF8 --locale=C.UTF-8 >&2
rm -f "$DIR/pwfile"
# 3>&- : the server must not inherit the pipe of `$(...)`, or the caller waits forever.
as_pg "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 3>&- \
  -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR -c max_connections=200 -c fsync=on" start >&2

PGPASSWORD=$PASSWORD "$PGBIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -q \
  -c "CREATE DATABASE tlm_test" >&2

umask 077
cat > "$STATE_FILE" <<EOF
PG_BIN=$PGBIN
PG_DIR=$DIR
PG_PORT=$PORT
PG_PASSWORD=$PASSWORD
EOF
echo "start_postgres: PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PORT, data in $DIR" >&2
echo "TLM_TEST_PG_URL=postgresql+psycopg2://postgres:${PASSWORD}@127.0.0.1:${PORT}/tlm_test" >&3
