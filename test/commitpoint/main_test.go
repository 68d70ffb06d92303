// Package commitpoint_test is the commit-point test: it crashes a real
// `kibotos ctrl` process (built with the failpoint tag) at every named
// point of the command runner and the store (internal/failpoint) while it
// runs each of six commands, restarts it on the same database, and checks
// that the command ends once, that ctrl's records agree with the node's
// block files and executions, and that replays answer the same.
// docs/RELIABILITY.md, "Failpoints and the commit-point test", says why
// it is built this way.
package commitpoint_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// kibotosBin is this tree's kibotos, built with the failpoint tag.
var kibotosBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kibotos-commitpoint")
	if err == nil {
		kibotosBin = filepath.Join(dir, "kibotos")
		var out []byte
		out, err = exec.Command("go", "build", "-tags", "failpoint", "-o", kibotosBin, "github.com/kibotos/kibotos/cmd/kibotos").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%w: %s", err, out)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "build kibotos with the failpoint tag:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
