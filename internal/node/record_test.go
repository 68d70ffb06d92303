package node_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
)

// An execution record written by an agent from before the VM provider
// seam (no "provider": it ran QEMU) still re-attaches: the restarted agent
// lists the execution, reaches its guest and stops it. The record on disk
// after the boot names its provider.
func TestOldFormatRecordReattaches(t *testing.T) {
	t.Parallel()
	h, art := newVMHarness(t)
	stop := h.start(h.config())
	s := recv(t, h.ctrl.sessions, "session")
	mark := len(s.seen)
	st := executionStatus(t, s.commandWithin(t, bootWait, "start-old", h.startOp(art, "inst-old", "boot-old")))
	s.report(t, mark, "inst-old", "a running report", func(obs *nodev1.NodeObservation, r *nodev1.ExecutionReport) bool {
		return r.GetRunning() && r.GetResponding()
	})
	if _, code, err := run(dataClient{s.hello.GetDataEndpoint(), s.dataToken}, "inst-old", "true"); err != nil || code != 0 {
		t.Fatalf("exec before the restart: exit %d %v", code, err)
	}

	path := filepath.Join(h.stateDir, "executions", "inst-old", "execution.json")
	var rec map[string]any
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	if rec["provider"] != "qemu" {
		t.Errorf("the record names provider %v, want qemu", rec["provider"])
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The record exactly as the agent before the seam wrote it.
	old := `{
  "instance_id": "inst-old",
  "boot_id": "boot-old",
  "accel": "` + st.GetAccel() + `",
  "layer_created": true,
  "layer": {
    "storage_pool": "local",
    "object_id": "ws-inst-old"
  },
  "started_at": "` + time.Now().UTC().Format(time.RFC3339Nano) + `"
}
`
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := h.config()
	cfg.EnrollmentGrant, cfg.Endpoint = "", ""
	h.start(cfg)
	s = recv(t, h.ctrl.sessions, "session after restart")
	if !slices.Equal(s.hello.GetInstanceIds(), []string{"inst-old"}) {
		t.Fatalf("hello after restart lists %v, want the execution of the old record", s.hello.GetInstanceIds())
	}
	again := executionStatus(t, s.commandWithin(t, bootWait, "start-old-2", h.startOp(art, "inst-old", "boot-old")))
	if again.GetAccel() != st.GetAccel() || again.GetBootId() != "boot-old" || !again.GetLayerCreated() {
		t.Errorf("status from the old record %v, want %v", again, st)
	}
	data2 := dataClient{s.hello.GetDataEndpoint(), s.dataToken}
	if out, code, err := run(data2, "inst-old", "cat", "/proc/sys/kernel/hostname"); err != nil || code != 0 || strings.TrimSpace(out) == "" {
		t.Fatalf("exec in the re-attached execution: %q exit %d %v", out, code, err)
	}
	if res := stopResult(t, s.commandWithin(t, 2*time.Minute, "stop-old", &nodev1.StopExecution{InstanceId: "inst-old"})); !res.GetDurable() {
		t.Errorf("stop of the re-attached execution: %v, want durable", res)
	}
}
