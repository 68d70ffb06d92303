package testenv

import (
	"os"
	"regexp"
	"testing"
)

// appliedLine is the node agent's log line for an operation it applied
// (not one it answered from its record of operations).
var appliedLine = regexp.MustCompile(`msg="operation applied".* operation_id=(\S+)`)

// AppliedOperations counts, per operation_id, how often the node agent
// whose log (slog's text format) is at logPath applied it: more than once
// is an operation run twice.
func AppliedOperations(t testing.TB, logPath string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, m := range appliedLine.FindAllStringSubmatch(string(b), -1) {
		counts[m[1]]++
	}
	return counts
}
