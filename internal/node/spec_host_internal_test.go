package node

import (
	"os/exec"
	"testing"
	"time"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/node/hostinfo"
	"github.com/kibotos/kibotos/internal/node/vm"
)

// spin starts a process that only burns CPU, standing in for a VMM.
func spin(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// pidSampler samples a process as the QEMU provider samples its VMM.
type pidSampler int

func (p pidSampler) Sample() (vm.Usage, error) {
	u, err := hostinfo.ReadProcessUsage(int(p))
	return vm.Usage{CPUSeconds: u.CPUSeconds, MemoryBytes: u.RSSBytes}, err
}

// The VMs' readings in an observation: vm_cpu_millis is absent at the
// node's first sample of a running VM (there is no interval to measure it
// over) and then counts the CPU it used since; vm_memory_bytes is what it
// has resident; a host without VMs reads zero for both; and unknown
// available memory is never judged tight.
func TestVMReadingsAreAbsentUntilTheyCanBeMade(t *testing.T) {
	none := &nodev1.NodeObservation{}
	newHostWatch(1<<62, time.Now).sampleVMs(none, nil)
	if none.VmCpuMillis == nil || none.GetVmCpuMillis() != 0 || none.VmMemoryBytes == nil || none.GetVmMemoryBytes() != 0 {
		t.Errorf("a host without VMs: cpu %v memory %v, want zero for both", none.VmCpuMillis, none.VmMemoryBytes)
	}

	h := newHostWatch(1<<62, time.Now)
	pid := spin(t)
	first := &nodev1.NodeObservation{}
	h.sampleVMs(first, map[string]sampler{"x": pidSampler(pid)})
	if first.VmCpuMillis != nil {
		t.Errorf("vm_cpu_millis at the first sample of a running VM: %d, want absent", first.GetVmCpuMillis())
	}
	if first.GetVmMemoryBytes() == 0 {
		t.Error("vm_memory_bytes of a running VM: 0")
	}
	start, err := hostinfo.ReadProcessUsage(pid)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for u, _ := hostinfo.ReadProcessUsage(pid); u.CPUSeconds <= start.CPUSeconds; u, _ = hostinfo.ReadProcessUsage(pid) {
		if time.Now().After(deadline) {
			t.Fatal("the spinning process used no CPU")
		}
		time.Sleep(10 * time.Millisecond)
	}
	next := &nodev1.NodeObservation{}
	h.sampleVMs(next, map[string]sampler{"x": pidSampler(pid)})
	if next.VmCpuMillis == nil || next.GetVmCpuMillis() == 0 {
		t.Errorf("vm_cpu_millis once the VM used CPU since the previous sample: %v, want more than 0", next.VmCpuMillis)
	}

	if since := h.judge(nil); !since.IsZero() {
		t.Errorf("unknown available memory judged tight since %v", since)
	}
}
