#!/usr/bin/env bash
# A local PostgreSQL server for the search's two-worker test (tests/test_search_postgres.py).
#
# Idempotent: installs Debian's `postgresql` when it is missing (apt-get), creates and starts the
# cluster, a user and a database, and prints one line on stdout:
#
#     export GEOHEAD_TEST_POSTGRES_URL=postgresql://geohead:geohead@127.0.0.1:PORT/geohead_test
#
# so that CI runs `eval "$(.ci/postgres.sh)"` before pytest. Everything else goes to stderr.
# Needs root (apt-get, and `runuser -u postgres` for the admin commands).
set -euo pipefail
DB=${GEOHEAD_PG_DB:-geohead_test}
USER_NAME=${GEOHEAD_PG_USER:-geohead}
PASSWORD=${GEOHEAD_PG_PASSWORD:-geohead}

log() { echo "postgres.sh: $*" >&2; }

if ! command -v pg_lsclusters >/dev/null 2>&1 || [ -z "$(ls /usr/lib/postgresql 2>/dev/null)" ]; then
  log "installing postgresql (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
fi
ver=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
if ! pg_lsclusters -h | awk '{print $1, $2}' | grep -qx "$ver main"; then
  log "creating cluster $ver/main"
  pg_createcluster "$ver" main >&2
fi
port=$(pg_lsclusters -h | awk -v v="$ver" '$1 == v && $2 == "main" {print $3}')
status=$(pg_lsclusters -h | awk -v v="$ver" '$1 == v && $2 == "main" {print $4}')
if [ "$status" != "online" ]; then
  log "starting cluster $ver/main on port $port"
  pg_ctlcluster "$ver" main start >&2
fi
for _ in $(seq 1 60); do
  pg_isready -q -h 127.0.0.1 -p "$port" && break
  sleep 0.5
done
pg_isready -q -h 127.0.0.1 -p "$port" || { log "server on 127.0.0.1:$port did not become ready"; exit 1; }

psql_admin() { runuser -u postgres -- psql -p "$port" -v ON_ERROR_STOP=1 -qtA "$@"; }
if [ "$(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = '$USER_NAME'")" != "1" ]; then
  log "creating role $USER_NAME"
  psql_admin -c "CREATE ROLE $USER_NAME LOGIN PASSWORD '$PASSWORD'" >&2
fi
if [ "$(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = '$DB'")" != "1" ]; then
  log "creating database $DB"
  psql_admin -c "CREATE DATABASE $DB OWNER $USER_NAME" >&2
fi
echo "export GEOHEAD_TEST_POSTGRES_URL=postgresql://$USER_NAME:$PASSWORD@127.0.0.1:$port/$DB"
