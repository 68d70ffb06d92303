#!/usr/bin/env bash
# The test command (README, .ci/run): installs what it needs on a fresh Debian
# machine, checks formatting, lint and generated code, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/apt.sh
. scripts/postgres.sh

# Each step says when it began (seconds since the start), so a CI log shows
# where its time went.
step() { printf '\n== %s (at %ds)\n' "$*" "$SECONDS"; }

step "dependencies"
# QEMU, Debian's static busybox (the test template), xz (to cut vmlinux out of
# the kernel package) and e2fsprogs (block files and images) for the VM tests;
# iproute2 and util-linux (ip, nsenter) for the network tests' own internet.
apt_ensure git ca-certificates qemu-system-x86 busybox-static xz-utils e2fsprogs iproute2 util-linux
# bash-completion, which the script of `kibotos completion bash` (cobra's)
# builds on: internal/cli's completion test presses TAB in bash.
apt_ensure bash-completion
# The Python SDK (sdk/python): Debian's python3 with the gRPC and protobuf
# runtimes and pytest, and protoc with the gRPC Python plugin and the
# well-known types' .proto files for its stubs.
apt_ensure python3 python3-grpcio python3-protobuf python3-pytest protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
go mod download

step "gofmt"
unformatted=$(gofmt -l $(find . -name '*.go' -not -path './gen/*' -not -path './.git/*'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...

step "buf lint, format and generated code"
go tool buf lint
go tool buf format --diff --exit-code
scripts/check-generated.sh

step "buf breaking"
# Wired for the first release: once a v* tag exists, the API must not break
# against the newest one. Before it, there is nothing to compare with.
latest_tag=$(git tag --list 'v*' --sort=-version:refname 2>/dev/null | head -n 1 || true)
if [ -n "$latest_tag" ]; then
	go tool buf breaking --against ".git#tag=${latest_tag}"
else
	echo "no release tag yet: nothing to compare the API with"
fi

step "PostgreSQL"
postgres_start
trap postgres_stop EXIT
# Every store test runs on SQLite and on this server; missing it is a failure.
export KIBOTOS_TEST_REQUIRE_POSTGRES=1
# The network tests build their internet in network namespaces (CI is root);
# missing them is a failure too.
export KIBOTOS_TEST_REQUIRE_NETNS=1

step "go test"
# The packages that boot the most VMs come first: go test starts packages
# in the order given (two at a time on two cores), so the longest ones
# overlap the rest instead of trailing after it (test/e2e, last by name,
# used to start when most else was done).
go test -race -count=1 -timeout 30m ./test/e2e ./internal/ctrl/fleet ./internal/ctrl/workspace \
	./internal/ctrl/transfer ./internal/ctrl/pool ./internal/node ./internal/node/vm/qemu ./test/commitpoint ./...

step "Python SDK (sdk/python)"
scripts/test-sdk-py.sh

step "TypeScript SDK"
# Node.js and npm (Debian's when missing), the SDK's modules from its
# lockfile, tsc, then node's test runner against a kibotos dev it starts.
scripts/test-sdk-ts.sh

step "the .deb (scripts/test-package.sh)"
# Builds the package, boots systemd in a systemd-nspawn container over an
# overlay of this machine's / (Debian's systemd-container), installs it there,
# starts kibotos-ctrl and kibotos-node as services and creates a Workspace
# through them (a real VM); removes the container, mounts and cgroups after.
scripts/test-package.sh

step "fuzz (short)"
# The seed corpora (f.Add and testdata/fuzz) ran above; this searches a
# little further each run: every fuzz target for 2000 inputs, one after the
# other. A count, not a duration: Go 1.26's fuzz coordinator can fail a
# target with a bare "context deadline exceeded" when a -fuzztime duration
# ends while a worker is busy (golang/go#75804, fixed in Go 1.27), which a
# loaded CI machine hit; a count has no deadline to race.
# scripts/fuzz.sh runs them for longer.
FUZZTIME=2000x scripts/fuzz.sh

step "done"
