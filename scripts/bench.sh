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
# Placements with 1,000 and 10,000 simulated nodes (internal/sim, a
# simulation for scale tests): each row starts its own ctrl and fleet.
go run ./bench/placement
# Export and restore throughput of a Volume's used blocks, and archive size,
# beside cp of the same block file (mkfs.ext4 from e2fsprogs; no VM boots).
apt_ensure e2fsprogs
go run ./bench/transfer
