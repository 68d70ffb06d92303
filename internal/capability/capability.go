// Package capability is the one vocabulary of what a node can do, shared
// by the node agent (which advertises these in its hello and
// observations) and ctrl (which places by them). A new VM provider adds
// its name to Providers here, and nothing else in ctrl changes.
package capability

// BlockFile is the capability of nodes that create and remove block files
// (Volumes, writable layers) in their storage pools.
const BlockFile = "storage.block_file"

// Accelerators a VM provider may report once it chose one.
const (
	AccelKVM = "accel.kvm"
	AccelTCG = "accel.tcg"
)

// Provider is the capability of nodes running VMs with the named provider.
func Provider(name string) string { return "provider." + name }

// The providers' capabilities (Provider of their names).
const (
	// QEMU runs executions as QEMU microVMs (internal/node/vm/qemu).
	QEMU = "provider.qemu"
	// Sim is the simulated fleet (internal/sim): it runs nothing, but
	// placement treats it as running VMs.
	Sim = "provider.sim"
)

// Providers are the capabilities of every VM provider: a node with any
// of them runs executions.
var Providers = []string{QEMU, Sim}

// known are every capability a node may advertise: what a Workspace's
// capabilities.required may name.
var known = append([]string{BlockFile, AccelKVM, AccelTCG}, Providers...)

// Known says whether c is in the vocabulary. A Workspace requiring one
// that is not is invalid_argument; one nobody offers fails placement.
func Known(c string) bool {
	for _, k := range known {
		if k == c {
			return true
		}
	}
	return false
}

// Vocabulary lists the known capabilities, for error messages.
func Vocabulary() []string { return append([]string(nil), known...) }
