package main

import "testing"

// The benchmark at its smallest (one round, a Volume of 64 MiB with 16 MiB
// written: an export, a restore's import and the baselines), so that CI
// sees it stop working; the figures are not judged.
func TestTheBenchmarkRunsOnce(t *testing.T) {
	if err := run(1, []int64{16 * mib}, 64*mib, false); err != nil {
		t.Fatal(err)
	}
}
