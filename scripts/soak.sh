#!/usr/bin/env bash
# The soak's long form (issue 16; test/e2e TestSoak): Workspaces on real
# VMs created, exec'd into, stopped, started and deleted in a loop while
# ctrl and the node agent are SIGKILLed at random, on SQLite and on a
# throwaway PostgreSQL, each for DURATION. It prints each database's table
# of counts (commands lost, run twice, stuck, leaked block files, QEMU
# processes and run directories: all must be 0) and fails when one is not.
#
#   scripts/soak.sh                        10m on each database, 4 Workspaces
#   DURATION=30m WORKSPACES=6 scripts/soak.sh
#   SEED=0x25a6557b294aebe5 scripts/soak.sh   the kills of an earlier run
#   scripts/soak.sh sqlite                 one database (sqlite|postgres)
#
# CI runs the short variant: the same test with its defaults (two
# Workspaces, two kills of each) in scripts/test.sh's go test step.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/apt.sh
. scripts/postgres.sh
apt_ensure qemu-system-x86 busybox-static xz-utils e2fsprogs
postgres_start
trap postgres_stop EXIT
export KIBOTOS_SOAK_DURATION=${DURATION:-10m} KIBOTOS_SOAK_WORKSPACES=${WORKSPACES:-4}
if [ -n "${SEED:-}" ]; then export KIBOTOS_SOAK_SEED=$SEED; fi
go test -count=1 -timeout 0 -v -run "TestSoak/${1:-}" ./test/e2e
