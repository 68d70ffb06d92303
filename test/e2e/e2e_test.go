// Package e2e tests the kibotos binary as a user runs it: real processes on
// real listeners.
package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/testenv"
)

var kibotosBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kibotos-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kibotosBin = filepath.Join(dir, "kibotos")
	// kibotos dev finds kibotos-guest next to itself, as scripts/dev.sh
	// builds them.
	for _, b := range []struct{ out, pkg, cgo string }{
		{kibotosBin, "github.com/kibotos/kibotos/cmd/kibotos", "1"},
		{filepath.Join(dir, "kibotos-guest"), "github.com/kibotos/kibotos/cmd/kibotos-guest", "0"},
	} {
		build := exec.Command("go", "build", "-o", b.out, b.pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build:", err)
			os.Exit(1)
		}
	}
	// Every kibotos node and dev the tests start takes the host's
	// accelerator from here instead of probing KVM again.
	accel, err := testenv.HostAccel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "accelerator:", err)
		os.Exit(1)
	}
	os.Setenv("KIBOTOS_ACCEL", string(accel))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// dev is a running `kibotos dev`.
type dev struct {
	home string
	cmd  *exec.Cmd
	env  map[string]string
}

// startDev runs `kibotos dev` on free ports and waits until it says ready.
func startDev(t *testing.T) *dev {
	t.Helper()
	return startDevAt(t, t.TempDir())
}

// restartDev runs `kibotos dev` again on the state of d.
func restartDev(t *testing.T, d *dev) *dev {
	t.Helper()
	return startDevAt(t, d.home)
}

// startDevAt runs `kibotos dev` on home's state, with flags added to its
// own.
func startDevAt(t *testing.T, home string, flags ...string) *dev {
	t.Helper()
	cmd := exec.Command(kibotosBin, append([]string{"dev",
		"--workspace-listen", "127.0.0.1:0", "--operator-listen", "127.0.0.1:0", "--node-listen", "127.0.0.1:0"}, flags...)...)
	cmd.Env = append(os.Environ(), "KIBOTOS_HOME="+home)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &dev{home: home, cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// VMs outlive the agent by design: end the ones this test left.
		_ = exec.Command("pkill", "-KILL", "-f", "qemu-system.*"+home).Run()
		if t.Failed() {
			t.Logf("kibotos dev stderr:\n%s", tail(stderr.String(), 40))
		}
	})
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready; Ctrl-C stops" {
				ready <- nil
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
		}
		ready <- fmt.Errorf("kibotos dev exited before it was ready: %s", stderr.String())
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Minute):
		t.Fatalf("kibotos dev not ready after 5 minutes: %s", stderr.String())
	}
	d.env, err = clientconfig.ReadEnvFile(filepath.Join(home, "dev", "endpoints.env"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// command is the CLI against d: it reads d's client configuration and
// nothing else of this environment.
func (d *dev) command(args ...string) *exec.Cmd {
	cmd := exec.Command(kibotosBin, args...)
	cmd.Env = []string{"KIBOTOS_HOME=" + d.home, "HOME=" + d.home, "PATH=" + os.Getenv("PATH")}
	return cmd
}

// kibotos runs the CLI against d and returns its output and exit code.
func (d *dev) kibotos(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := d.command(args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// kibotosJSON runs the CLI with `-o json` and decodes what it prints (its
// stdout; progress goes to stderr) into msg, the API's response message.
func (d *dev) kibotosJSON(t *testing.T, msg proto.Message, args ...string) {
	t.Helper()
	cmd := d.command(append(args, "-o", "json")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kibotos %v: %v: %s", args, err, stderr.String())
	}
	if err := protojson.Unmarshal(out, msg); err != nil {
		t.Fatalf("kibotos %v printed %s: %v", args, out, err)
	}
}

func postJSON(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// The check, as a user does it with curl: the operator listener
// answers ListNodeRegistrations, the workspace listener does not know it.
func TestDevServesOperatorAPIOnlyOnTheOperatorListener(t *testing.T) {
	d := startDev(t)
	const path = "/kibotos.operator.v1.NodeRegistrationService/ListNodeRegistrations"
	code, body := postJSON(t, d.env["KIBOTOS_OPERATOR_ENDPOINT"]+path, d.env["KIBOTOS_OPERATOR_TOKEN"])
	if code != http.StatusOK || !strings.HasPrefix(body, "{") {
		t.Errorf("operator listener: %d %s, want a list", code, body)
	}
	if code, body := postJSON(t, d.env["KIBOTOS_WORKSPACE_ENDPOINT"]+path, d.env["KIBOTOS_TOKEN"]); code != http.StatusNotFound {
		t.Errorf("workspace listener: %d %s, want 404", code, body)
	}
}

func TestCLIFindsDevWithoutFlags(t *testing.T) {
	d := startDev(t)
	out, code := d.kibotos(t, "workspace", "list", "-o", "json")
	if code != 0 || strings.TrimSpace(out) != "{}" {
		t.Errorf("workspace list -o json: exit %d: %s", code, out)
	}
	out, code = d.kibotos(t, "workspace", "create", "--memory", "100")
	if code != 1 || !strings.Contains(out, "invalid_argument: spec.resources.memory_bytes: must be at least 128 MiB") {
		t.Errorf("workspace create --memory 100: exit %d: %s", code, out)
	}
	out, code = d.kibotos(t, "node", "list")
	if code != 0 || !strings.HasPrefix(out, "NODE") {
		t.Errorf("node list: exit %d: %s", code, out)
	}
	// dev's node counts CPU 8x from its first start (a 2-vCPU machine
	// refused the third one-vCPU Workspace at 1x); memory follows the default.
	out, code = d.kibotos(t, "overcommit", "get", "dev", "-o", "json")
	want := `"cpu": {
    "thousandths": 8000,
    "source": "OVERCOMMIT_SOURCE_NODE"
  },
  "memory": {
    "thousandths": 1000,
    "source": "OVERCOMMIT_SOURCE_DEFAULT"
  }`
	if code != 0 || !strings.Contains(out, want) {
		t.Errorf("overcommit get dev -o json: exit %d: %s, want %s", code, out, want)
	}
	out, code = d.kibotos(t, "template", "list")
	if code != 0 || !strings.Contains(out, "busybox") {
		t.Errorf("template list: exit %d: %s (want the busybox template dev made)", code, out)
	}
	out, code = d.kibotos(t, "egress", "list")
	if code != 0 || !strings.HasPrefix(out, "EGRESS") {
		t.Errorf("egress list: exit %d: %s (want the empty table)", code, out)
	}
	out, code = d.kibotos(t, "resolver", "list", "-o", "json")
	if code != 0 || strings.TrimSpace(out) != "{}" {
		t.Errorf("resolver list -o json: exit %d: %s", code, out)
	}
	out, code = d.kibotos(t, "transfer", "list")
	if code != 0 || !strings.HasPrefix(out, "TRANSFER") {
		t.Errorf("transfer list: exit %d: %s (want the empty table)", code, out)
	}
}

func TestDevStopsCleanlyOnSIGTERM(t *testing.T) {
	d := startDev(t)
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("kibotos dev after SIGTERM: %v", err)
		}
	case <-ctx.Done():
		t.Error("kibotos dev did not stop after SIGTERM")
	}
}

// The ctrl-core issue's check, through the Connect JSON API as curl sends it.
func TestDevJSONAPIReplaysRefusesAndWritesNothingStale(t *testing.T) {
	d := startDev(t)
	ws, tok := d.env["KIBOTOS_WORKSPACE_ENDPOINT"], d.env["KIBOTOS_TOKEN"]
	call := func(method, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, ws+"/kibotos.ctrl.v1."+method, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		return res.StatusCode, out
	}
	create := `{"command":{"commandId":"vol-1"},"spec":{"capacityBytes":"67108864"}}`
	code, first := call("VolumeService/CreateVolume", create)
	if code != 200 {
		t.Fatalf("CreateVolume: %d %v", code, first)
	}
	_, again := call("VolumeService/CreateVolume", create)
	if fmt.Sprint(again["volume"]) != fmt.Sprint(first["volume"]) {
		t.Errorf("replay answered %v, want %v", again, first)
	}
	if _, other := call("VolumeService/CreateVolume", `{"command":{"commandId":"vol-1"},"spec":{"capacityBytes":"134217728"}}`); other["code"] != "already_exists" {
		t.Errorf("same command_id, other capacity: %v", other)
	}
	for _, memory := range []string{"104857600", "210239488"} { // 100 MiB, 200.5 MiB
		_, res := call("WorkspaceService/CreateWorkspace", `{"command":{"commandId":"ws-`+memory+`"},"spec":{"resources":{"memoryBytes":"`+memory+`"}}}`)
		if res["code"] != "invalid_argument" {
			t.Errorf("memory_bytes %s: %v", memory, res)
		}
	}
	volID := first["volume"].(map[string]any)["volumeId"].(string)
	_, res := call("VolumeService/UpdateVolumeLabels", `{"command":{"commandId":"l-1"},"volumeId":"`+volID+`","expectedLabelsRevision":"1","labels":{"a":"1"}}`)
	if res["code"] != nil {
		t.Fatalf("labels at revision 1: %v", res)
	}
	_, res = call("VolumeService/UpdateVolumeLabels", `{"command":{"commandId":"l-2"},"volumeId":"`+volID+`","expectedLabelsRevision":"1","labels":{"a":"2"}}`)
	if res["code"] != "failed_precondition" {
		t.Errorf("stale labels_revision: %v", res)
	}
	_, got := call("VolumeService/GetVolume", `{"volumeId":"`+volID+`"}`)
	vol := got["volume"].(map[string]any)
	if fmt.Sprint(vol["labels"]) != "map[a:1]" || vol["labelsRevision"] != "2" {
		t.Errorf("after a stale write: labels %v revision %v", vol["labels"], vol["labelsRevision"])
	}
	// The dev node makes the Volume's block file: it becomes AVAILABLE.
	deadline := time.Now().Add(time.Minute)
	for vol["state"] != "VOLUME_STATE_AVAILABLE" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		_, got = call("VolumeService/GetVolume", `{"volumeId":"`+volID+`"}`)
		vol = got["volume"].(map[string]any)
	}
	if vol["state"] != "VOLUME_STATE_AVAILABLE" {
		t.Errorf("the dev node did not create the Volume: %v", vol)
	}
}

// httpClientWithToken sends the API key with every request.
func httpClientWithToken(token string) *http.Client {
	return &http.Client{Transport: tokenTransport{token}}
}

type tokenTransport struct{ token string }

func (t tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+t.token)
	return http.DefaultTransport.RoundTrip(req)
}
