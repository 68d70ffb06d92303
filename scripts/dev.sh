#!/usr/bin/env bash
# The run command (README): builds bin/kibotos and starts `kibotos dev`, the
# whole system on this machine. Arguments are passed to `kibotos dev`.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/kibotos ./cmd/kibotos
exec bin/kibotos dev "$@"
