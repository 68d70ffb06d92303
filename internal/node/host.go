package node

import (
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/node/hostinfo"
	"github.com/kibotos/kibotos/internal/node/vm"
)

// DefaultMemoryTightThreshold is the available host memory below which a
// node judges its memory too tight for new Workspaces, unless configured.
const DefaultMemoryTightThreshold = 256 << 20

// hostWatch keeps what the node reports about its host from one
// observation to the next: the VMs' CPU time at the previous sample, and
// since when memory is tight.
type hostWatch struct {
	threshold uint64
	now       func() time.Time

	mu         sync.Mutex
	sampledAt  time.Time
	cpuSeconds map[string]float64 // instance id → its VMM's CPU time at sampledAt
	tightSince time.Time          // zero while memory is not tight
}

// sampler is a VM whose use the host's readings count (vm.Instance).
type sampler interface {
	Sample() (vm.Usage, error)
}

func newHostWatch(threshold uint64, now func() time.Time) *hostWatch {
	if threshold == 0 {
		threshold = DefaultMemoryTightThreshold
	}
	return &hostWatch{threshold: threshold, now: now}
}

// fill sets the host readings of obs: available memory, pressure, the
// VMs' CPU over the interval since the previous sample and their resident
// memory, and whether memory is tight. A reading the node cannot make is
// left absent.
func (h *hostWatch) fill(obs *nodev1.NodeObservation, vms map[string]sampler) {
	if m, err := hostinfo.ReadMeminfo(); err == nil && m.HasAvailable {
		obs.MemoryAvailableBytes = &m.AvailableBytes
	}
	if p, err := hostinfo.ReadPressure("cpu"); err == nil && p.HasSome60 {
		obs.CpuPressureSomeBasisPoints = &p.Some60
	}
	if p, err := hostinfo.ReadPressure("memory"); err == nil {
		if p.HasSome60 {
			obs.MemoryPressureSomeBasisPoints = &p.Some60
		}
		if p.HasFull60 {
			obs.MemoryPressureFullBasisPoints = &p.Full60
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sampleVMs(obs, vms)
	if since := h.judge(obs.MemoryAvailableBytes); !since.IsZero() {
		obs.MemoryTightSince = timestamppb.New(since)
		obs.MemoryTightThresholdBytes = h.threshold
	}
}

// sampleVMs reads the VMMs' CPU time and resident memory. CPU is what
// they used since the previous sample, over the time between the two (a
// VM started meanwhile counts from its first sample); it is absent at the
// node's first sample of a running VM, with no interval to measure.
func (h *hostWatch) sampleVMs(obs *nodev1.NodeObservation, vms map[string]sampler) {
	now := time.Now()
	cpu := map[string]float64{}
	var rss uint64
	var used float64
	for id, v := range vms {
		u, err := v.Sample()
		if err != nil {
			continue // it ended meanwhile; the next report says so
		}
		cpu[id], rss = u.CPUSeconds, rss+u.MemoryBytes
		if prev, ok := h.cpuSeconds[id]; ok {
			used += max(u.CPUSeconds-prev, 0)
		}
	}
	obs.VmMemoryBytes = &rss
	switch elapsed := now.Sub(h.sampledAt).Seconds(); {
	case len(cpu) == 0:
		obs.VmCpuMillis = new(uint32)
	case !h.sampledAt.IsZero() && elapsed > 0:
		millis := uint32(used / elapsed * 1000)
		obs.VmCpuMillis = &millis
	}
	h.sampledAt, h.cpuSeconds = now, cpu
}

// judge says since when memory is tight, or zero while it is not: tight
// while available memory is below the threshold. Unknown available memory
// is not judged tight.
func (h *hostWatch) judge(available *uint64) time.Time {
	if available == nil || *available >= h.threshold {
		h.tightSince = time.Time{}
	} else if h.tightSince.IsZero() {
		h.tightSince = h.now()
	}
	return h.tightSince
}

// refuseIfTight says why a new execution is refused while the host's
// memory is tight, or "" when it is not.
func (h *hostWatch) refuseIfTight() string {
	m, err := hostinfo.ReadMeminfo()
	if err != nil || !m.HasAvailable || m.AvailableBytes >= h.threshold {
		return ""
	}
	return fmt.Sprintf("the host's memory is tight: %d MiB available, below the node's threshold of %d MiB", m.AvailableBytes>>20, h.threshold>>20)
}
