#!/usr/bin/env bash
# Regenerates gen/ from proto/ with the tool versions pinned in go.mod, and
# the TypeScript SDK's sdk/typescript/src/gen with the plugin its lockfile pins.
set -euo pipefail
cd "$(dirname "$0")/.."
go tool buf format -w
go tool buf lint
go tool buf generate
# The Python SDK's stubs (sdk/python/kibotos/ctrl/v1).
scripts/generate-sdk-py.sh

. scripts/apt.sh
. scripts/node.sh
node_ensure
npm_ci sdk/typescript
go tool buf generate --template sdk/typescript/buf.gen.yaml
