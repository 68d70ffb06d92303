package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
)

// A guest that resets its machine comes back within the same execution:
// the same VM (its writable layer kept, its tmpfs new), reported running
// throughout with restart_count 1 and last_reset_at, coming_back until its
// agent answers again, never as ended. (With -no-reboot a reset ended the
// execution as a guest shutdown.)
func TestGuestResetComesBackWithinTheExecution(t *testing.T) {
	t.Parallel()
	h, art := newVMHarness(t)
	h.start(h.config())
	s := recv(t, h.ctrl.sessions, "session")
	executionStatus(t, s.commandWithin(t, bootWait, "start-r", h.startOp(art, "inst-r", "boot-r")))
	data := dataClient{s.hello.GetDataEndpoint(), s.dataToken}
	if _, code, err := run(data, "inst-r", "sh", "-c", "echo kept > /root/kept && echo gone > /tmp/gone && sync"); err != nil || code != 0 {
		t.Fatalf("markers: exit %d %v", code, err)
	}
	pid := pidOf(t, h.stateDir, "inst-r")

	mark := len(s.seen)
	before := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	stream, err := data.agent("inst-r").Exec(ctx, connect.NewRequest(&guestv1.ExecRequest{Argv: []string{"reboot", "-f"}}))
	if err == nil {
		for stream.Receive() {
		}
		_ = stream.Close()
	}
	cancel()

	var back *nodev1.ExecutionReport
	s.expectWithin(t, bootWait, "the guest back from its reset", func(m *nodev1.SessionRequest) bool {
		for _, r := range m.GetObservation().GetExecutions() {
			if r.GetInstanceId() == "inst-r" && r.GetRestartCount() == 1 && r.GetResponding() && !r.GetComingBack() {
				back = r
				return true
			}
		}
		return false
	})
	for _, m := range s.seen[mark:] {
		for _, r := range m.GetObservation().GetExecutions() {
			switch {
			case r.GetInstanceId() != "inst-r":
			case !r.GetRunning() || r.GetEnd() != nodev1.ExecutionEnd_EXECUTION_END_UNSPECIFIED:
				t.Fatalf("the reset ended the execution: %v", r)
			case r.GetRestartCount() == 1 && !r.GetResponding() && !r.GetComingBack():
				t.Errorf("an observation of the guest while it came back: %v", r)
			}
		}
	}
	if at := back.GetLastResetAt().AsTime(); at.Before(before) || at.After(time.Now()) {
		t.Errorf("last_reset_at %v, want between %v and now", at, before)
	}
	if pidOf(t, h.stateDir, "inst-r") != pid {
		t.Error("the reset started another VM")
	}
	out, code, err := run(data, "inst-r", "sh", "-c", "cat /root/kept; ls /tmp")
	if err != nil || code != 0 || !strings.Contains(out, "kept") || strings.Contains(out, "gone") {
		t.Errorf("after the reset: %q exit %d %v, want the layer's file and a new tmpfs", out, code, err)
	}
}
