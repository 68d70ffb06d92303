// Package vm is the node's seam for VM providers: a Provider starts an
// Instance from a provider-neutral Spec (disks by role, vCPUs, memory,
// kernel and initramfs, a network attachment, the guest channel) and takes
// one back from its run directory after an agent restart; an Instance is
// waited for until its guest agent answers, killed, watched for its exit
// and its cause, and sampled. The node core imports only this package;
// the providers (today internal/node/vm/qemu) are chosen by the wiring
// (internal/cli), and every one passes the conformance suite in
// internal/node/vm/vmtest.
package vm

import (
	"context"
	"net/http"
	"time"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
	"github.com/kibotos/kibotos/internal/guestchan"
	"github.com/kibotos/kibotos/internal/node/netslot"
)

// Provider runs VMs of one kind.
type Provider interface {
	// Name is the provider's name: the on-disk execution record names it,
	// and its capability is capability.Provider(Name()).
	Name() string
	// Available is nil when the provider can run VMs on this host, else
	// why not (QEMU is not installed).
	Available() error
	// Capabilities are what the provider advertises now, its own
	// capability.Provider(Name()) first; more may follow once it has
	// booted something (the accelerator it chose).
	Capabilities() []string
	// Start boots s in the background: the VM outlives the agent. Start
	// returns once the VM runs; WaitAgent says when its guest answers.
	Start(ctx context.Context, s Spec) (Instance, error)
	// Attach takes back the VM of a run directory after an agent restart.
	// A VM that ended meanwhile comes back as an Instance that has exited,
	// with the cause the run directory shows.
	Attach(runDir string) (Instance, error)
}

// Role is what a disk is to the guest.
type Role int

const (
	// TemplateRoot is the Template's root image, read only.
	TemplateRoot Role = iota + 1
	// WritableLayer is the layer over the root.
	WritableLayer
	// Volume is the Workspace's Volume, mounted at its MountPath.
	Volume
)

// Disk is one block device of the guest.
type Disk struct {
	Role Role
	Path string
	// MountPath is where the guest mounts a Volume.
	MountPath string
}

// Spec is one VM to start. Its disks are in role order: template root,
// writable layer, then the Volume when there is one.
type Spec struct {
	// RunDir is the execution's directory, the provider's own: what it
	// needs to re-attach lives there.
	RunDir string
	Kernel string // an uncompressed vmlinux
	Initrd string
	VCPUs  int
	// MemoryMiB is guest RAM, exactly what the Workspace asked for.
	MemoryMiB uint64
	Disks     []Disk
	// Network backs the guest's one network device.
	Network netslot.Attachment
	// BootID and Hostname are given to the guest (kibotos-guest reads
	// them from the kernel command line, see GuestParams).
	BootID   string
	Hostname string
}

// Cause is how an instance ended without being killed by the node.
type Cause int

const (
	// Crashed: the VMM ended otherwise (a guest panic, a VMM error, a
	// kill by someone else).
	Crashed Cause = iota
	// PowerOff: the guest powered its machine off.
	PowerOff
	// Reset: the guest reset its machine and the VMM ended during the
	// reset. (A provider restarts a guest that resets: see
	// Instance.Resets.)
	Reset
	// OOMKilled: the host's OOM killer ended the VMM.
	OOMKilled
	// Killed: the node killed it (Kill).
	Killed
)

func (c Cause) String() string {
	switch c {
	case PowerOff:
		return "power off"
	case Reset:
		return "reset"
	case OOMKilled:
		return "killed by the host's OOM killer"
	case Killed:
		return "killed"
	}
	return "crashed"
}

// Exit is how an instance ended.
type Exit struct {
	Cause Cause
	// Detail is the VMM's own account (its exit status, the guest's last
	// words), for logs.
	Detail string
}

// Usage is what an instance's VMM has used.
type Usage struct {
	CPUSeconds  float64
	MemoryBytes uint64 // resident
}

// Instance is one running (or ended) VM.
type Instance interface {
	// PID is the VMM's process, for logs.
	PID() int
	// Accel is how guest code runs ("kvm", "tcg"), as ExecutionStatus
	// reports it.
	Accel() string
	// Channel is the transport of the guest channel: HTTP/2 to the guest
	// agent (internal/guestchan), shared by every caller.
	Channel() http.RoundTripper
	// WaitAgent pings the guest agent until it answers, the VM exits or
	// ctx ends; the error says what the guest and the VMM said.
	WaitAgent(ctx context.Context) (*guestv1.PingResponse, error)
	// Exited is closed once the VM has ended.
	Exited() <-chan struct{}
	// Exit is how it ended, once Exited is closed.
	Exit() Exit
	// Kill ends the VM at once and waits until it is gone.
	Kill() error
	// Sample reads what the VMM used so far.
	Sample() (Usage, error)
	// Resets is how many times the guest reset its machine and was
	// restarted within this instance, and when the provider saw the
	// latest reset (on this host's clock; zero while count is 0).
	Resets() (count int, last time.Time)
	// Release lets go of the guest channel, so another agent process can
	// connect; the VM keeps running.
	Release()
}

// Agent is a client of inst's guest agent.
func Agent(inst Instance) guestv1connect.GuestAgentServiceClient {
	return guestv1connect.NewGuestAgentServiceClient(&http.Client{Transport: inst.Channel()}, guestchan.BaseURL)
}
