package guest_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
	"github.com/kibotos/kibotos/internal/guest"
	"github.com/kibotos/kibotos/internal/guestchan"
)

// serve runs agent on a unix socket the way it runs on a virtio-serial port
// (one connection at a time, through guestchan) and returns a client.
func serve(t *testing.T, agent *guest.Agent) guestv1connect.GuestAgentServiceClient {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- guest.Serve(ctx, "unix:"+sock, agent.Handler(), nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	hc := guestchan.Client(sock)
	t.Cleanup(hc.CloseIdleConnections)
	client := guestv1connect.NewGuestAgentServiceClient(hc, guestchan.BaseURL)
	// The first call may come before the socket listens.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := client.Ping(ctx, connect.NewRequest(&guestv1.PingRequest{}))
		if err == nil {
			return client
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent does not answer: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPing(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	client := serve(t, &guest.Agent{BootID: "boot-7", Version: "v1.2.3", Now: func() time.Time { return at }})
	res, err := client.Ping(context.Background(), connect.NewRequest(&guestv1.PingRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.GetBootId() != "boot-7" || res.Msg.GetAgentVersion() != "v1.2.3" || !res.Msg.GetGuestTime().AsTime().Equal(at) {
		t.Fatalf("%v", res.Msg)
	}
}

func TestPingTellsTheTime(t *testing.T) {
	client := serve(t, &guest.Agent{BootID: "b"})
	before := time.Now()
	res, err := client.Ping(context.Background(), connect.NewRequest(&guestv1.PingRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Msg.GetGuestTime().AsTime(); got.Before(before.Add(-time.Second)) || got.After(time.Now().Add(time.Second)) {
		t.Fatalf("guest time %s", got)
	}
}

type fakeMachine struct {
	result    guest.ShutdownResult
	shutdowns atomic.Int32
	powerOff  chan string
}

func (m *fakeMachine) Shutdown(context.Context) guest.ShutdownResult {
	m.shutdowns.Add(1)
	return m.result
}

func (m *fakeMachine) PowerOff(reason string) { m.powerOff <- reason }

func TestShutdownAnswersThenPowersOff(t *testing.T) {
	m := &fakeMachine{result: guest.ShutdownResult{Durable: true, Message: "unmounted 3 file systems"}, powerOff: make(chan string, 2)}
	client := serve(t, &guest.Agent{Machine: m})
	res, err := client.Shutdown(context.Background(), connect.NewRequest(&guestv1.ShutdownRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Msg.GetDurable() || res.Msg.GetMessage() != "unmounted 3 file systems" {
		t.Fatalf("%v", res.Msg)
	}
	select {
	case <-m.powerOff:
	case <-time.After(5 * time.Second):
		t.Fatal("no power-off after the answer")
	}
	// A second call (a retry whose answer was lost) answers the same way.
	res, err = client.Shutdown(context.Background(), connect.NewRequest(&guestv1.ShutdownRequest{}))
	if err != nil || !res.Msg.GetDurable() {
		t.Fatalf("%v %v", res, err)
	}
	select {
	case <-m.powerOff:
		t.Fatal("powered off twice")
	case <-time.After(500 * time.Millisecond):
	}
}

func TestStandaloneShutdownStopsTheAgent(t *testing.T) {
	stopped := make(chan struct{})
	sys := guest.Standalone(testLogger(t), func() { close(stopped) })
	client := serve(t, &guest.Agent{Machine: sys})
	res, err := client.Shutdown(context.Background(), connect.NewRequest(&guestv1.ShutdownRequest{}))
	if err != nil || !res.Msg.GetDurable() || !strings.Contains(res.Msg.GetMessage(), "not PID 1") {
		t.Fatalf("%v %v", res, err)
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("not stopped")
	}
}

func TestWithoutAMachineShutdownIsUnimplemented(t *testing.T) {
	client := serve(t, &guest.Agent{})
	_, err := client.Shutdown(context.Background(), connect.NewRequest(&guestv1.ShutdownRequest{}))
	if connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Fatalf("%v", err)
	}
}

// execResult collects one Exec call.
type execResult struct {
	pid            int32
	stdout, stderr bytes.Buffer
	exited         *guestv1.ExecExited
	events         int
}

func runExec(t *testing.T, ctx context.Context, client guestv1connect.GuestAgentServiceClient, req *guestv1.ExecRequest) (*execResult, error) {
	t.Helper()
	stream, err := client.Exec(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	r := &execResult{}
	for stream.Receive() {
		ev := stream.Msg()
		r.events++
		switch e := ev.Event.(type) {
		case *guestv1.ExecResponse_Started:
			if r.events != 1 {
				t.Errorf("started is event %d", r.events)
			}
			r.pid = e.Started.GetPid()
		case *guestv1.ExecResponse_Output:
			switch e.Output.GetStream() {
			case guestv1.ExecStream_EXEC_STREAM_STDOUT:
				r.stdout.Write(e.Output.GetData())
			case guestv1.ExecStream_EXEC_STREAM_STDERR:
				r.stderr.Write(e.Output.GetData())
			default:
				t.Errorf("output on stream %v", e.Output.GetStream())
			}
		case *guestv1.ExecResponse_Exited:
			r.exited = e.Exited
		}
	}
	return r, stream.Err()
}

func TestExec(t *testing.T) {
	client := serve(t, &guest.Agent{Reaper: reaper})
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "hello.sh"), "#!/bin/sh\necho hello from $0\n")
	if err := os.Chmod(filepath.Join(dir, "hello.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB through stdin and back
	for _, tc := range []struct {
		name           string
		req            *guestv1.ExecRequest
		stdout, stderr string
		code, signal   int32
	}{
		{name: "output and status",
			req:    &guestv1.ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}},
			stdout: "out\n", stderr: "err\n", code: 3},
		{name: "stdin",
			req:    &guestv1.ExecRequest{Argv: []string{"cat"}, Stdin: []byte("fed in")},
			stdout: "fed in"},
		{name: "a lot of stdin",
			req:    &guestv1.ExecRequest{Argv: []string{"cat"}, Stdin: []byte(big)},
			stdout: big},
		{name: "environment",
			req:    &guestv1.ExecRequest{Argv: []string{"sh", "-c", `echo "$HOME $TERM $GREETING"; echo "$PATH"`}, Env: map[string]string{"GREETING": "hi", "HOME": "/home/u"}},
			stdout: "/home/u xterm-256color hi\n" + guest.BaseEnv["PATH"] + "\n"},
		{name: "cwd",
			req:    &guestv1.ExecRequest{Argv: []string{"./hello.sh"}, Cwd: dir},
			stdout: "hello from ./hello.sh\n"},
		{name: "default cwd is /",
			req:    &guestv1.ExecRequest{Argv: []string{"pwd"}},
			stdout: "/\n"},
		{name: "killed by a signal",
			req:  &guestv1.ExecRequest{Argv: []string{"sh", "-c", "kill -TERM $$"}},
			code: -1, signal: 15},
		{name: "a background child does not hold the call",
			req:    &guestv1.ExecRequest{Argv: []string{"sh", "-c", "sleep 3 & echo started"}},
			stdout: "started\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r, err := runExec(t, context.Background(), client, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if r.pid <= 0 {
				t.Errorf("pid %d", r.pid)
			}
			if r.stdout.String() != tc.stdout || r.stderr.String() != tc.stderr {
				t.Errorf("stdout %.200q stderr %q", r.stdout.String(), r.stderr.String())
			}
			if r.exited == nil || r.exited.GetExitCode() != tc.code || r.exited.GetSignal() != tc.signal {
				t.Errorf("exited %v, want code %d signal %d", r.exited, tc.code, tc.signal)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
}

func TestExecThatCannotStart(t *testing.T) {
	client := serve(t, &guest.Agent{Reaper: reaper})
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "not-executable"), "echo no\n")
	for _, tc := range []struct {
		name string
		req  *guestv1.ExecRequest
		code connect.Code
	}{
		{"no such program", &guestv1.ExecRequest{Argv: []string{"kibotos-no-such-program"}}, connect.CodeFailedPrecondition},
		{"no such file", &guestv1.ExecRequest{Argv: []string{"/nonexistent/prog"}}, connect.CodeFailedPrecondition},
		{"not executable", &guestv1.ExecRequest{Argv: []string{filepath.Join(dir, "not-executable")}}, connect.CodeFailedPrecondition},
		{"no such directory", &guestv1.ExecRequest{Argv: []string{"/bin/sh", "-c", "true"}, Cwd: "/nonexistent"}, connect.CodeFailedPrecondition},
		{"empty argv", &guestv1.ExecRequest{}, connect.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := runExec(t, context.Background(), client, tc.req)
			if connect.CodeOf(err) != tc.code {
				t.Fatalf("error %v, want %v", err, tc.code)
			}
			if r != nil && r.events != 0 {
				t.Errorf("%d events streamed", r.events)
			}
		})
	}
}

// A call that ends early kills its process group.
func TestCancelledExecKillsTheProcess(t *testing.T) {
	client := serve(t, &guest.Agent{Reaper: reaper})
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := client.Exec(ctx, connect.NewRequest(&guestv1.ExecRequest{Argv: []string{"sleep", "60"}}))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatalf("no started event: %v", stream.Err())
	}
	pid := int(stream.Msg().GetStarted().GetPid())
	cancel()
	stream.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join("/proc", itoa(pid))); errors.Is(err, os.ErrNotExist) {
			return // killed and reaped
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still there", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWithoutAReaperExecIsUnimplemented(t *testing.T) {
	client := serve(t, &guest.Agent{})
	_, err := runExec(t, context.Background(), client, &guestv1.ExecRequest{Argv: []string{"true"}})
	if connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Fatalf("%v", err)
	}
}
