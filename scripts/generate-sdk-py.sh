#!/usr/bin/env bash
# Regenerates the Python SDK's stubs (sdk/python/kibotos/ctrl/v1) from
# proto/kibotos/ctrl/v1 with Debian's protoc and grpc_python_plugin, whose
# versions match Debian's python3-protobuf and python3-grpcio runtimes.
# With an argument, writes the tree to that directory instead (the
# freshness check in scripts/check-generated.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/apt.sh
# libprotobuf-dev holds the well-known types' .proto files
# (google/protobuf/timestamp.proto, duration.proto) the ctrl API imports.
apt_ensure protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
out=${1:-sdk/python}
rm -rf "$out/kibotos/ctrl"
mkdir -p "$out"
protoc -I proto -I /usr/include \
	--python_out="$out" --pyi_out="$out" \
	--grpc_python_out="$out" --plugin=protoc-gen-grpc_python="$(command -v grpc_python_plugin)" \
	proto/kibotos/ctrl/v1/*.proto
# protoc writes modules, not packages: these make kibotos.ctrl.v1 a regular
# package of the SDK, so the stubs' absolute imports resolve inside it.
touch "$out/kibotos/ctrl/__init__.py" "$out/kibotos/ctrl/v1/__init__.py"
