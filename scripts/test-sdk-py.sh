#!/usr/bin/env bash
# The Python SDK's tests (sdk/python/tests): pytest with Debian's python3
# against a real `kibotos dev` (real VMs) that the tests start on free ports
# with their own state directory. Part of the test command (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/apt.sh
# What real VMs need (as scripts/dev.sh), then the Python runtime the stubs
# were generated for.
apt_ensure qemu-system-x86 busybox-static xz-utils e2fsprogs ca-certificates \
	python3 python3-grpcio python3-protobuf python3-pytest
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
# kibotos dev finds kibotos-guest next to itself.
go build -o "$bin/kibotos" ./cmd/kibotos
CGO_ENABLED=0 go build -o "$bin/kibotos-guest" ./cmd/kibotos-guest
# dev's node takes the accelerator the Go tests probed once per host boot
# (internal/testenv/hostaccel) instead of probing KVM again: 20 s and a
# core where KVM is there but crawls.
export KIBOTOS_ACCEL=${KIBOTOS_ACCEL:-$(go run ./internal/testenv/hostaccel)}
# Debian's interpreter by path: a pyenv or virtualenv python3 earlier on
# PATH has neither python3-grpcio nor python3-protobuf.
KIBOTOS_BIN="$bin/kibotos" PYTHONDONTWRITEBYTECODE=1 \
	/usr/bin/python3 -m pytest -p no:cacheprovider -q sdk/python/tests "$@"
