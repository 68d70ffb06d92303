#!/usr/bin/env bash
# The TypeScript SDK's tests (sdk/typescript): builds it with tsc and runs
# node's test runner against a real `kibotos dev` (real VMs) that this
# script starts on its own state directory and free loopback ports, and
# stops at the end. The tests find dev as any client does, through the
# client configuration dev writes ($KIBOTOS_HOME/config.env).
# Run by scripts/test.sh; alone, it installs what it needs as that does.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/apt.sh
. scripts/node.sh
apt_ensure qemu-system-x86 busybox-static xz-utils e2fsprogs ca-certificates
node_ensure
echo "node $(node --version), npm $(npm --version)"
npm_ci sdk/typescript
(cd sdk/typescript && npm run --silent build)

work=$(mktemp -d)
dev_pid=""
stop_dev() {
	if [ -n "$dev_pid" ]; then
		kill "$dev_pid" 2>/dev/null || true
		wait "$dev_pid" 2>/dev/null || true
	fi
	# VMs outlive the node agent by design: end the ones the tests left,
	# each named by this run's own state directory.
	pkill -KILL -f "qemu-system.*$work/" 2>/dev/null || true
	rm -rf "$work"
}
trap stop_dev EXIT

# kibotos dev finds kibotos-guest beside itself, as scripts/dev.sh builds them.
go build -o "$work/bin/kibotos" ./cmd/kibotos
CGO_ENABLED=0 go build -o "$work/bin/kibotos-guest" ./cmd/kibotos-guest

# dev's node takes the accelerator the Go tests probed once per host boot
# (internal/testenv/hostaccel) instead of probing KVM again: 20 s and a
# core where KVM is there but crawls.
export KIBOTOS_ACCEL=${KIBOTOS_ACCEL:-$(go run ./internal/testenv/hostaccel)}
# The kernel package download is shared with the Go tests' cache.
KIBOTOS_HOME="$work/home" KIBOTOS_CACHE="${KIBOTOS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kibotos}" \
	"$work/bin/kibotos" dev --workspace-listen 127.0.0.1:0 --operator-listen 127.0.0.1:0 --node-listen 127.0.0.1:0 \
	>"$work/dev.log" 2>&1 &
dev_pid=$!
# Ready when dev says so (its first start builds the platform and template);
# tail ends with dev, so a dev that exits fails this at once.
if ! timeout 300 grep -q -m 1 -x 'ready; Ctrl-C stops' < <(tail -n +1 -f --pid="$dev_pid" "$work/dev.log"); then
	echo "kibotos dev did not get ready:" >&2
	cat "$work/dev.log" >&2
	exit 1
fi

# Only dev's client configuration: nothing of this environment's.
status=0
(cd sdk/typescript && env -u KIBOTOS_WORKSPACE_ENDPOINT -u KIBOTOS_TOKEN -u KIBOTOS_CONFIG KIBOTOS_HOME="$work/home" \
	node --test dist/test/*.test.js) || status=$?
# The package as a user installs it: npm pack's tarball (package.json's
# "files", not this directory) installed into a project of its own, its
# dependencies from the registry as the lockfile does not pin them there,
# running README's quickstart (compiled) against the same dev.
packed() {
	local app="$work/app" tgz out
	mkdir -p "$app"
	tgz=$(cd sdk/typescript && npm pack --silent --pack-destination "$work")
	echo '{ "name": "kibotos-sdk-user", "private": true, "type": "module" }' >"$app/package.json"
	(cd "$app" && npm install --silent --no-audit --no-fund "$work/$tgz")
	cp sdk/typescript/dist/examples/quickstart.js "$app/"
	out=$(cd "$app" && env -u KIBOTOS_WORKSPACE_ENDPOINT -u KIBOTOS_TOKEN -u KIBOTOS_CONFIG KIBOTOS_HOME="$work/home" node quickstart.js)
	if ! grep -Eqx 'hello from ws-[0-9a-f]+' <<<"$(sed -n 1p <<<"$out" | sed 's/^0 //')" || [ "$(sed -n 2p <<<"$out")" != "hi from TypeScript" ]; then
		echo "the packed SDK's quickstart printed: $out" >&2
		return 1
	fi
	echo "npm pack's $tgz, installed into a project of its own, ran the quickstart"
}
[ "$status" -ne 0 ] || packed || status=$?
if [ "$status" -ne 0 ]; then
	echo "kibotos dev's log (the last 200 lines):" >&2
	tail -n 200 "$work/dev.log" >&2
fi
exit "$status"
