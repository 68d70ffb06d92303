#!/usr/bin/env bash
# Fails when the committed gen/ differs from a fresh generation with the tool
# versions pinned in go.mod (and sdk/typescript/src/gen, below).
set -euo pipefail
cd "$(dirname "$0")/.."
fresh=$(mktemp -d)
trap 'rm -rf "$fresh"' EXIT
go tool buf generate -o "$fresh"
if ! diff -r "$fresh/gen" gen; then
	echo "gen/ is stale: run scripts/generate.sh and commit the result" >&2
	exit 1
fi
echo "gen/ matches a fresh generation"
# The Python SDK's stubs, from Debian's protoc (scripts/generate-sdk-py.sh).
scripts/generate-sdk-py.sh "$fresh/sdk-py"
if ! diff -r -x __pycache__ "$fresh/sdk-py/kibotos/ctrl" sdk/python/kibotos/ctrl; then
	echo "sdk/python/kibotos/ctrl is stale: run scripts/generate-sdk-py.sh and commit the result" >&2
	exit 1
fi
echo "sdk/python/kibotos/ctrl matches a fresh generation"

# The TypeScript SDK's code: the same .proto files through protoc-gen-es,
# as sdk/typescript/buf.gen.yaml says, with the plugin its lockfile pins.
. scripts/apt.sh
. scripts/node.sh
node_ensure
npm_ci sdk/typescript
go tool buf generate --template sdk/typescript/buf.gen.yaml -o "$fresh"
if ! diff -r "$fresh/sdk/typescript/src/gen" sdk/typescript/src/gen; then
	echo "sdk/typescript/src/gen is stale: run scripts/generate.sh and commit the result" >&2
	exit 1
fi
echo "sdk/typescript/src/gen matches a fresh generation"
