package node_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
)

// A node whose host has less memory available than its threshold reports
// itself memory tight (since when, on its clock, and the threshold) and
// refuses a new execution as resource_exhausted; its clock replies come
// from its own clock.
func TestMemoryTightNodeRefusesNewExecutions(t *testing.T) {
	needQEMU(t)
	h := newHarness(t)
	cfg := h.config()
	cfg.MemoryTightThreshold = 1 << 62
	ahead := time.Now().Add(time.Hour)
	cfg.Now = func() time.Time { return ahead }
	h.start(cfg)
	s := recv(t, h.ctrl.sessions, "session")

	obs := s.expect(t, "an observation", func(m *nodev1.SessionRequest) bool { return m.GetObservation() != nil }).GetObservation()
	if !obs.GetMemoryTightSince().AsTime().Equal(ahead) || obs.GetMemoryTightThresholdBytes() != 1<<62 {
		t.Errorf("memory tight since %v, threshold %d; want since the node's clock said %v, threshold 2^62",
			obs.GetMemoryTightSince().AsTime(), obs.GetMemoryTightThresholdBytes(), ahead)
	}
	if obs.MemoryAvailableBytes == nil || obs.VmCpuMillis == nil || obs.GetVmCpuMillis() != 0 || obs.VmMemoryBytes == nil || obs.GetVmMemoryBytes() != 0 {
		t.Errorf("host readings of a node without VMs: %v", obs)
	}

	start := &nodev1.StartExecution{
		InstanceId: "inst-1", BootId: "b",
		Layer:              &nodev1.BlockFileRef{StoragePool: "local", Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_WRITABLE_LAYER, ObjectId: "ws-1"},
		LayerCapacityBytes: 64 * MiB, Vcpus: 1, MemoryBytes: 128 * MiB,
		Kernel: &nodev1.Artifact{Digest: "sha256:" + hex64}, Initrd: &nodev1.Artifact{Digest: "sha256:" + hex64}, TemplateRoot: &nodev1.Artifact{Digest: "sha256:" + hex64},
	}
	if res := s.command(t, "op-start", start); connect.Code(res.GetCode()) != connect.CodeResourceExhausted || !strings.Contains(res.GetMessage(), "memory is tight") {
		t.Errorf("StartExecution on a memory-tight node: %v %s, want resource_exhausted", connect.Code(res.GetCode()), res.GetMessage())
	}

	s.send(t, &nodev1.SessionResponse{Message: &nodev1.SessionResponse_ClockProbe{ClockProbe: &nodev1.ClockProbe{ProbeId: 7}}})
	reply := s.expect(t, "the clock reply", func(m *nodev1.SessionRequest) bool { return m.GetClockReply().GetProbeId() == 7 }).GetClockReply()
	if !reply.GetNodeTime().AsTime().Equal(ahead) {
		t.Errorf("clock reply %v, want the node's clock %v", reply.GetNodeTime().AsTime(), ahead)
	}
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
