# shellcheck shell=bash
# Node.js for the TypeScript SDK (sdk/typescript). Sourced after apt.sh.

# node_ensure: node and npm, from Debian's packages (nodejs, npm) when
# missing. A Node.js installed otherwise is used as it is: NodeSource's
# nodejs package, for one, carries npm and conflicts with Debian's.
node_ensure() {
	command -v node >/dev/null 2>&1 || apt_ensure nodejs
	command -v npm >/dev/null 2>&1 || apt_ensure npm
}

# npm_ci DIR: DIR's node_modules exactly as its package-lock.json pins
# them, from the npm registry; skipped when they were installed from this
# very lockfile.
npm_ci() {
	local dir=$1
	if ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.kibotos-lockfile"; then
		(cd "$dir" && npm ci --no-audit --no-fund)
		cp "$dir/package-lock.json" "$dir/node_modules/.kibotos-lockfile"
	fi
}
