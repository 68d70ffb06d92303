#!/usr/bin/env bash
# Builds the kibotos .deb into dist/: kibotos and kibotos-guest (as
# scripts/dev.sh builds bin/), the systemd units, configuration and
# maintainer scripts of packaging/, packed by nfpm (the version
# packaging/go.mod pins, a module of its own so nfpm's dependencies stay out
# of kibotos's); and python3-kibotos, the Python SDK (packaging/nfpm-python.yaml).
# Prints the two .debs' paths, kibotos's first, one a line.
#   VERSION=1.2.3 scripts/package.sh    # default: from git (0.0.0~gitDATE.SHA)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

step() { printf 'package.sh: %s\n' "$*" >&2; }

if [ -z "${VERSION:-}" ]; then
	# A Debian version dpkg orders by commit date: tags are not made yet.
	VERSION="0.0.0~git$(git log -1 --format=%cd --date=format:%Y%m%d%H%M%S).$(git rev-parse --short=12 HEAD)"
fi
export VERSION
BUILD="$root/dist/build"
mkdir -p "$BUILD"

ldflags="-s -w -X github.com/kibotos/kibotos/internal/version.Version=$VERSION"
step "building kibotos $VERSION (ctrl, node agent and CLI)"
go build -trimpath -ldflags="$ldflags" -o "$BUILD/kibotos" ./cmd/kibotos
step "building kibotos-guest (static, for the guests' initramfs)"
CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" -o "$BUILD/kibotos-guest" ./cmd/kibotos-guest

deb="$root/dist/kibotos_${VERSION}_amd64.deb"
rm -f "$deb"
step "building nfpm (packaging/go.mod; cached after the first time)"
(cd packaging && go build -o "$BUILD/nfpm" github.com/goreleaser/nfpm/v2/cmd/nfpm)
step "packing $deb"
"$BUILD/nfpm" package --config packaging/nfpm.yaml --packager deb --target "$deb" >&2

pydeb="$root/dist/python3-kibotos_${VERSION}_all.deb"
rm -rf "$pydeb" "$BUILD/python"
mkdir -p "$BUILD/python"
# The package as the repository has it, without bytecode a local run left.
cp -r sdk/python/kibotos "$BUILD/python/"
find "$BUILD/python" \( -name __pycache__ -o -name '*.pyc' \) -prune -exec rm -rf {} +
chmod -R u=rwX,go=rX "$BUILD/python"
step "packing $pydeb"
"$BUILD/nfpm" package --config packaging/nfpm-python.yaml --packager deb --target "$pydeb" >&2
echo "$deb"
echo "$pydeb"
