#!/usr/bin/env bash
# Fails when the committed gen/ differs from a fresh generation with the tool
# versions pinned in go.mod.
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
