#!/usr/bin/env bash
# Regenerates gen/ from proto/ with the tool versions pinned in go.mod.
set -euo pipefail
cd "$(dirname "$0")/.."
go tool buf format -w
go tool buf lint
go tool buf generate
# The Python SDK's stubs (sdk/python/kibotos/ctrl/v1).
scripts/generate-sdk-py.sh
