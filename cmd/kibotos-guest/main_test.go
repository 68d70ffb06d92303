package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
	"github.com/kibotos/kibotos/internal/guestchan"
)

// The test binary runs as kibotos-guest when this variable is set.
const asMain = "KIBOTOS_GUEST_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// agent starts kibotos-guest as a plain process serving on a unix socket.
func agent(t *testing.T, env []string, args ...string) (*exec.Cmd, guestv1connect.GuestAgentServiceClient, *strings.Builder) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asMain+"=1", "KIBOTOS_GUEST_PORT=unix:"+sock)
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	hc := guestchan.Client(sock)
	t.Cleanup(hc.CloseIdleConnections)
	return cmd, guestv1connect.NewGuestAgentServiceClient(hc, guestchan.BaseURL), &stderr
}

func ping(t *testing.T, client guestv1connect.GuestAgentServiceClient) *guestv1.PingResponse {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := client.Ping(context.Background(), connect.NewRequest(&guestv1.PingRequest{}))
		if err == nil {
			return res.Msg
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(10 * time.Second):
		t.Fatal("kibotos-guest did not exit")
		return -1
	}
}

func TestServesOnAUnixSocketAndStopsOnSIGTERM(t *testing.T) {
	cmd, client, stderr := agent(t, nil, "-boot-id", "boot-by-flag")
	res := ping(t, client)
	if res.GetBootId() != "boot-by-flag" || res.GetAgentVersion() == "" || res.GetGuestTime() == nil {
		t.Fatalf("%v", res)
	}
	stream, err := client.Exec(context.Background(), connect.NewRequest(&guestv1.ExecRequest{Argv: []string{"echo", "hi"}}))
	if err != nil {
		t.Fatal(err)
	}
	var out string
	for stream.Receive() {
		out += string(stream.Msg().GetOutput().GetData())
	}
	if stream.Err() != nil || out != "hi\n" {
		t.Fatalf("exec: %q %v", out, stream.Err())
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if code := waitExit(t, cmd); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "kibotos-guest: ") {
		t.Errorf("log lines lack the prefix:\n%s", stderr)
	}
}

func TestShutdownCallEndsTheAgent(t *testing.T) {
	cmd, client, stderr := agent(t, []string{"KIBOTOS_GUEST_BOOT_ID=boot-by-env"})
	if id := ping(t, client).GetBootId(); id != "boot-by-env" {
		t.Fatalf("boot id %q", id)
	}
	res, err := client.Shutdown(context.Background(), connect.NewRequest(&guestv1.ShutdownRequest{}))
	if err != nil || !res.Msg.GetDurable() {
		t.Fatalf("%v %v", res, err)
	}
	if code := waitExit(t, cmd); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
}

func TestTheKernelsBootIDByDefault(t *testing.T) {
	want, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skip(err)
	}
	_, client, _ := agent(t, []string{"KIBOTOS_GUEST_BOOT_ID="})
	if id := ping(t, client).GetBootId(); id != strings.TrimSpace(string(want)) {
		t.Fatalf("boot id %q, want %q", id, want)
	}
}

func TestWithoutAPortItRefusesToRun(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), asMain+"=1", "KIBOTOS_GUEST_PORT=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "KIBOTOS_GUEST_PORT") {
		t.Fatalf("%v: %s", err, out)
	}
}
