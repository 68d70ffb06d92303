#!/usr/bin/env bash
# The run command (README): installs what real VMs need from Debian when
# missing, builds bin/kibotos and bin/kibotos-guest, and starts `kibotos dev`,
# the whole system on this machine. Arguments are passed to `kibotos dev`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/apt.sh
echo "dev.sh: checking the Debian packages real VMs need (QEMU, busybox, xz, e2fsprogs, CA certificates)"
apt_ensure qemu-system-x86 busybox-static xz-utils e2fsprogs ca-certificates
echo "dev.sh: building bin/kibotos (ctrl, the node agent and the CLI in one binary)"
go build -o bin/kibotos ./cmd/kibotos
echo "dev.sh: building bin/kibotos-guest (the agent inside each VM, static)"
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/kibotos-guest ./cmd/kibotos-guest
echo "dev.sh: starting bin/kibotos dev $*"
exec bin/kibotos dev "$@"
