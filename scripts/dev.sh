#!/usr/bin/env bash
# The run command (README): installs what real VMs need from Debian when
# missing, builds bin/kibotos and bin/kibotos-guest, and starts `kibotos dev`,
# the whole system on this machine. Arguments are passed to `kibotos dev`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/apt.sh
apt_ensure qemu-system-x86 busybox-static xz-utils e2fsprogs ca-certificates
go build -o bin/kibotos ./cmd/kibotos
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/kibotos-guest ./cmd/kibotos-guest
exec bin/kibotos dev "$@"
