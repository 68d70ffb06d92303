package guest

import (
	"os"
	"testing"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// SendProcessInput "writes bytes to a process's stdin (or its terminal
// with a pty) and optionally closes it." A process that ends as soon as it
// has read the bytes can end between the write and the close, and its
// exit closes its stdin: the close that follows finds stdin closed, as it
// asked, and is no failure. The interleaving is made here step by step,
// as the scheduler rarely makes it.
func TestACloseAfterTheExitClosedStdinSucceeds(t *testing.T) {
	for _, pty := range []bool{false, true} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		p := &apiProcess{changed: make(chan struct{}), input: w}
		if pty {
			p.pty = r // a terminal's master; only its presence counts here
		}
		in := p.input
		p.recordExit(&ctrlv1.ProcessExitStatus{Cause: ctrlv1.ProcessEndCause_PROCESS_END_CAUSE_EXITED})
		if err := p.closeInput(in); err != nil {
			t.Errorf("pty %v: close after the exit closed stdin: %v, want success", pty, err)
		}
	}
}
