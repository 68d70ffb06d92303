#!/usr/bin/env bash
# Runs every Go fuzz target of the repository — each `func FuzzXxx(f
# *testing.F)` in a _test.go file, found by name, so a new target is picked
# up without being listed here — one after the other, each for FUZZTIME
# (default 60s; any -fuzztime value: 10m, 100000x). docs/RELIABILITY.md
# ("What is fuzzed") says what each one checks.
#
#   scripts/fuzz.sh                          every target, 60s each
#   FUZZTIME=10m scripts/fuzz.sh Unpack      the targets whose name matches
#   FUZZ_PARALLEL=2 scripts/fuzz.sh          at most 2 fuzzing processes
#
# scripts/test.sh runs it with FUZZTIME=2000x in CI (a count: see there
# why not a duration).
#
# Findings: when an input fails a target, `go test` writes it to
# testdata/fuzz/FuzzXxx/<hash> in that target's package and prints the
# command that re-runs it. Every file there is part of the target's seed
# corpus, which plain `go test` runs (CI's "go test" step included), so a
# finding becomes a regression seed once it is committed: fix the bug and
# keep the file (renamed to say what it is, if you like). Inputs that only
# widened coverage stay in Go's cache ($(go env GOCACHE)/fuzz), not in the
# tree. A run goes on past a failing target and lists the failures at the
# end.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZTIME:-60s}
filter=${1:-.}

# fuzz_targets prints "package-directory FuzzName" for every fuzz target.
fuzz_targets() {
	grep -rEo --include='*_test.go' --exclude-dir=.git --exclude-dir=gen '^func Fuzz[A-Za-z0-9_]*\(' . |
		sed -E 's|^(.*)/[^/]+:func (Fuzz[A-Za-z0-9_]*)\($|\1 \2|' | sort -u
}

failed=()
ran=0
while read -r pkg target; do
	[[ $target =~ $filter ]] || continue
	ran=$((ran + 1))
	printf -- '-- %s %s (%s)\n' "$pkg" "$target" "$fuzztime"
	if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" ${FUZZ_PARALLEL:+-parallel "$FUZZ_PARALLEL"} "$pkg" </dev/null; then
		failed+=("$pkg $target")
	fi
done < <(fuzz_targets)

if [ "$ran" -eq 0 ]; then
	echo "no fuzz target matches $filter"
	exit 1
fi
if [ "${#failed[@]}" -gt 0 ]; then
	printf '%d of %d fuzz targets failed (their inputs are in testdata/fuzz/ of each package):\n' "${#failed[@]}" "$ran"
	printf '  %s\n' "${failed[@]}"
	exit 1
fi
echo "$ran fuzz targets passed"
