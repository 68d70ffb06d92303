#!/usr/bin/env bash
# Runs the benchmarks that print tables, against SQLite and a throwaway
# PostgreSQL with fsync on (durable commits, as in production).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/apt.sh
. scripts/postgres.sh
PG_FSYNC=on postgres_start
trap postgres_stop EXIT
go run ./bench/admission "$@"
