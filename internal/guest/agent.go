package guest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
)

// Machine is what the agent does to the guest as a whole. *System is the
// real one.
type Machine interface {
	// Shutdown stops every process and unmounts the storage. It is done
	// once; later calls return the first result.
	Shutdown(ctx context.Context) ShutdownResult
	// PowerOff shuts down (if that was not done yet) and ends the machine.
	PowerOff(reason string)
}

// ShutdownResult is what Shutdown achieved.
type ShutdownResult struct {
	// Durable is true when every storage mount was unmounted (a remount
	// read-only is not enough).
	Durable bool
	Message string
}

// powerOffDelay is how long the agent waits, after answering Shutdown,
// before powering off: the answer has to cross the channel first.
const powerOffDelay = 300 * time.Millisecond

// Agent serves kibotos.guest.v1.GuestAgentService.
type Agent struct {
	guestv1connect.UnimplementedGuestAgentServiceHandler

	BootID  string
	Version string
	// Now is the guest's clock; nil is time.Now.
	Now func() time.Time
	// Reaper starts Exec processes and must be running (Reaper.Run); nil
	// answers Exec unimplemented.
	Reaper *Reaper
	// Machine serves Shutdown; nil answers unimplemented.
	Machine Machine
	// Root is the directory guest paths of file calls are under, and whose
	// /etc/passwd names users; empty is / (tests use a temporary one).
	Root string

	// procs are the processes StartProcess started (processes.go).
	procs processTable
	// Memory is the guest's memory watch, reported by Ping; nil reports
	// none.
	Memory *MemoryWatch
	// Sampler answers Sample; nil answers unimplemented.
	Sampler *Sampler

	shutdownOnce sync.Once
}

var _ guestv1connect.GuestAgentServiceHandler = (*Agent)(nil)

// MaxMessageBytes bounds each request message the agent reads (Connect
// reads any size by default): the node relays ctrl's calls, whose own
// limit is 8 MiB by default, and file data is at most 1 MiB a message.
const MaxMessageBytes = 8 << 20

// Handler returns the HTTP handler of the service.
func (a *Agent) Handler() http.Handler {
	path, h := guestv1connect.NewGuestAgentServiceHandler(a, connect.WithReadMaxBytes(MaxMessageBytes))
	mux := http.NewServeMux()
	mux.Handle(path, h)
	return mux
}

// Ping answers the node's liveness probe.
func (a *Agent) Ping(context.Context, *connect.Request[guestv1.PingRequest]) (*connect.Response[guestv1.PingResponse], error) {
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	return connect.NewResponse(&guestv1.PingResponse{
		BootId:       a.BootID,
		AgentVersion: a.Version,
		GuestTime:    timestamppb.New(now()),
		Memory:       a.Memory.Report(),
	}), nil
}

// Shutdown stops the guest's processes and unmounts its storage, answers,
// then powers the machine off.
func (a *Agent) Shutdown(ctx context.Context, _ *connect.Request[guestv1.ShutdownRequest]) (*connect.Response[guestv1.ShutdownResponse], error) {
	if a.Machine == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this agent cannot shut its machine down"))
	}
	r := a.Machine.Shutdown(ctx)
	a.shutdownOnce.Do(func() {
		go func() {
			// The answer is on its way when the handler returned; give it
			// a moment to cross the channel.
			time.Sleep(powerOffDelay)
			a.Machine.PowerOff("Shutdown call")
		}()
	})
	return connect.NewResponse(&guestv1.ShutdownResponse{Durable: r.Durable, Message: r.Message}), nil
}

// Sample reads the guest's resource usage now: the MetricsSample fields
// the guest knows.
func (a *Agent) Sample(context.Context, *connect.Request[guestv1.SampleRequest]) (*connect.Response[guestv1.SampleResponse], error) {
	if a.Sampler == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this agent does not sample its guest"))
	}
	sample, err := a.Sampler.Sample(time.Now())
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("sampling the guest: %w", err))
	}
	return connect.NewResponse(&guestv1.SampleResponse{Sample: sample}), nil
}
