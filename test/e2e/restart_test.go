package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
)

// proc is a kibotos process with its stderr in a file.
type proc struct {
	cmd    *exec.Cmd
	stderr string
}

// startProc runs kibotos with args and waits until its stdout prints a line
// matching ready (empty: no wait).
func startProc(t *testing.T, name string, env []string, ready string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(kibotosBin, args...)
	cmd.Env = append(os.Environ(), env...)
	errPath := filepath.Join(t.TempDir(), name+".stderr")
	errFile, err := os.Create(errPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = errFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stderr: errPath}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		errFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(errPath)
			t.Logf("%s stderr:\n%s", name, tail(string(b), 40))
		}
	})
	found := make(chan bool, 2)
	go func(want string) {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if want != "" && strings.Contains(sc.Text(), want) {
				found <- true
				want = ""
			}
		}
		found <- false
		_, _ = io.Copy(io.Discard, stdout)
	}(ready)
	if ready != "" {
		select {
		case ok := <-found:
			if !ok {
				b, _ := os.ReadFile(errPath)
				t.Fatalf("%s exited before it was ready:\n%s", name, b)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s not ready after a minute", name)
		}
	}
	return p
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	handedOut.mu.Lock()
	defer handedOut.mu.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		// The kernel may give a port it gave before once its listener
		// closed: two ctrls of one test once got the same one.
		if !handedOut.addrs[addr] {
			handedOut.addrs[addr] = true
			return addr
		}
	}
}

// handedOut are the addresses freeAddr gave in this test process.
var handedOut = struct {
	mu    sync.Mutex
	addrs map[string]bool
}{addrs: map[string]bool{}}

// ctrlAddrs are the three listeners of one ctrl, fixed so a restarted ctrl
// is found where the node and clients left it.
type ctrlAddrs struct{ workspace, operator, node string }

func newCtrlAddrs(t *testing.T) ctrlAddrs {
	return ctrlAddrs{freeAddr(t), freeAddr(t), freeAddr(t)}
}

func startCtrl(t *testing.T, name, stateDir, database string, a ctrlAddrs) *proc {
	args := []string{"ctrl", "--state-dir", stateDir, "--workspace-listen", a.workspace, "--operator-listen", a.operator, "--node-listen", a.node}
	if database != "" {
		args = append(args, "--database", database)
	}
	// Ready once it said how the CLI reaches it (the last of its start's
	// lines): that endpoints file, copied or named by KIBOTOS_CONFIG.
	return startProc(t, name, nil, "for the kibotos CLI: copy "+filepath.Join(stateDir, "endpoints.env")+" to ", args...)
}

// ctrlConfig is what the `kibotos ctrl` whose state is in stateDir wrote
// to its endpoints.env: its endpoints and keys.
func ctrlConfig(t *testing.T, stateDir string) clientconfig.Config {
	t.Helper()
	env, err := clientconfig.ReadEnvFile(filepath.Join(stateDir, "endpoints.env"))
	if err != nil {
		t.Fatal(err)
	}
	return clientconfig.Config{
		WorkspaceEndpoint: env[clientconfig.EnvWorkspaceEndpoint], OperatorEndpoint: env[clientconfig.EnvOperatorEndpoint],
		Token: env[clientconfig.EnvToken], OperatorToken: env[clientconfig.EnvOperatorToken],
	}
}

// ctrlClient is the client side of a standalone `kibotos ctrl`: a home whose
// client configuration is ctrl's endpoints.env, as an operator would set it
// up, so the CLI and API helpers of the dev tests work on it.
func ctrlClient(t *testing.T, stateDir string) *dev {
	t.Helper()
	home := t.TempDir()
	if err := clientconfig.Write(filepath.Join(home, "config.env"), ctrlConfig(t, stateDir)); err != nil {
		t.Fatal(err)
	}
	env, err := clientconfig.ReadEnvFile(filepath.Join(stateDir, "endpoints.env"))
	if err != nil {
		t.Fatal(err)
	}
	return &dev{home: home, env: env}
}

func enrollGrant(t *testing.T, c clientconfig.Config, nodeID string) string {
	t.Helper()
	client := operatorv1connect.NewEnrollmentServiceClient(http.DefaultClient, c.OperatorEndpoint)
	req := connect.NewRequest(&operatorv1.CreateEnrollmentGrantRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "grant-" + nodeID}, NodeId: nodeID, Ttl: durationpb.New(time.Hour),
	})
	req.Header().Set("Authorization", "Bearer "+c.OperatorToken)
	res, err := client.CreateEnrollmentGrant(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetSecret()
}

// startNode runs `kibotos node` with its state in stateDir, declaring the
// pools given as --pool values (NAME=DIR, or NAME=DIR,default).
func startNode(t *testing.T, nodeID, nodeEndpoint, grant, stateDir string, pools ...string) *proc {
	// Registered first, so it runs after the agent is killed: a VM
	// outlives its node agent by design.
	t.Cleanup(func() { testenv.PowerOffVMs(stateDir) })
	return startProc(t, nodeID, []string{"KIBOTOS_ENROLLMENT_GRANT=" + grant}, "", nodeArgs(nodeID, nodeEndpoint, stateDir, pools)...)
}

// nodeArgs are the arguments of `kibotos node`.
func nodeArgs(nodeID, nodeEndpoint, stateDir string, pools []string) []string {
	args := []string{"node", "--ctrl", "http://" + nodeEndpoint, "--node-id", nodeID, "--state-dir", stateDir}
	for _, p := range pools {
		args = append(args, "--pool", p)
	}
	return args
}

// givePoolCapacity sets a capacity on a pool: a pool takes no new objects
// until it has one.
func givePoolCapacity(t *testing.T, c clientconfig.Config, pool string) {
	t.Helper()
	client := operatorv1connect.NewNodeRegistrationServiceClient(http.DefaultClient, c.OperatorEndpoint)
	get := connect.NewRequest(&operatorv1.GetStoragePoolRequest{StoragePool: pool})
	get.Header().Set("Authorization", "Bearer "+c.OperatorToken)
	p, err := client.GetStoragePool(context.Background(), get)
	if err != nil {
		t.Fatal(err)
	}
	set := connect.NewRequest(&operatorv1.SetStoragePoolCapacityRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "capacity-" + pool}, StoragePool: pool,
		ExpectedVersion: p.Msg.GetPool().GetVersion(), CapacityBytes: 1 << 40,
	})
	set.Header().Set("Authorization", "Bearer "+c.OperatorToken)
	if _, err := client.SetStoragePoolCapacity(context.Background(), set); err != nil {
		t.Fatal(err)
	}
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func nodeReady(c clientconfig.Config, nodeID string) bool {
	client := operatorv1connect.NewNodeRegistrationServiceClient(http.DefaultClient, c.OperatorEndpoint)
	req := connect.NewRequest(&operatorv1.GetNodeRegistrationRequest{NodeId: nodeID})
	req.Header().Set("Authorization", "Bearer "+c.OperatorToken)
	res, err := client.GetNodeRegistration(context.Background(), req)
	return err == nil && res.Msg.GetRegistration().GetStatus() == operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY
}

func volumeClient(c clientconfig.Config, endpoint string) ctrlv1connect.VolumeServiceClient {
	return ctrlv1connect.NewVolumeServiceClient(http.DefaultClient, "http://"+endpoint, connect.WithInterceptors(connect.UnaryInterceptorFunc(
		func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", "Bearer "+c.Token)
				return next(ctx, req)
			}
		})))
}

func createVolume(client ctrlv1connect.VolumeServiceClient, commandID string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := client.CreateVolume(ctx, connect.NewRequest(&ctrlv1.CreateVolumeRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: commandID}, Spec: &ctrlv1.VolumeSpec{CapacityBytes: 16 << 20},
	}))
	if err != nil {
		return "", err
	}
	return res.Msg.GetVolume().GetVolumeId(), nil
}

func availableVolumes(t *testing.T, client ctrlv1connect.VolumeServiceClient) map[string]bool {
	out := map[string]bool{}
	token := ""
	for {
		res, err := client.ListVolumes(context.Background(), connect.NewRequest(&ctrlv1.ListVolumesRequest{PageToken: token, PageSize: 1000}))
		if err != nil {
			return nil
		}
		for _, v := range res.Msg.GetVolumes() {
			if v.GetState() == ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE {
				out[v.GetVolumeId()] = true
			}
		}
		if token = res.Msg.GetNextPageToken(); token == "" {
			return out
		}
	}
}

// appliedOperations counts, per operation_id, how often the node applied it.
func appliedOperations(t *testing.T, stderrPath string) map[string]int {
	return testenv.AppliedOperations(t, stderrPath)
}

// checkExactlyOnce asserts every admitted command's block file exists and
// the node applied each operation once.
func checkExactlyOnce(t *testing.T, ids map[string]string, poolDir, nodeStderr string) {
	t.Helper()
	applied := appliedOperations(t, nodeStderr)
	for cmdID, volID := range ids {
		if n := applied[cmdID+"/ensure"]; n != 1 {
			t.Errorf("operation %s/ensure applied %d times, want once", cmdID, n)
		}
		if _, err := os.Stat(filepath.Join(poolDir, "volumes", volID+".img")); err != nil {
			t.Errorf("block file of %s: %v", volID, err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(poolDir, "volumes", "*.img"))
	if len(files) != len(ids) {
		t.Errorf("%d block files for %d admitted commands", len(files), len(ids))
	}
}

// Kill ctrl with SIGKILL while CreateVolume commands are in flight, start it
// again: every admitted command completes, exactly once.
func TestCtrlKilledWithCommandsInFlightCompletesEachOnce(t *testing.T) {
	stateDir, poolDir := t.TempDir(), t.TempDir()
	addrs := newCtrlAddrs(t)
	ctrlProc := startCtrl(t, "ctrl-1", stateDir, "", addrs)
	cfg := ctrlConfig(t, stateDir)
	nodeProc := startNode(t, "node-a", addrs.node, enrollGrant(t, cfg, "node-a"), t.TempDir(), "shared="+poolDir+",default")
	waitUntil(t, "node-a READY", time.Minute, func() bool { return nodeReady(cfg, "node-a") })
	givePoolCapacity(t, cfg, "shared")

	const n = 40
	client := volumeClient(cfg, addrs.workspace)
	var mu sync.Mutex
	ids := map[string]string{} // command_id → volume_id, as answered
	var wg sync.WaitGroup
	answered := make(chan struct{}, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cmdID := fmt.Sprintf("restart-%02d", i)
			if volID, err := createVolume(client, cmdID); err == nil {
				mu.Lock()
				ids[cmdID] = volID
				mu.Unlock()
				answered <- struct{}{}
			}
		}(i)
	}
	for i := 0; i < n/4; i++ {
		<-answered
	}
	if err := ctrlProc.cmd.Process.Kill(); err != nil { // SIGKILL, mid-flight
		t.Fatal(err)
	}
	_ = ctrlProc.cmd.Wait()
	wg.Wait()
	t.Logf("%d of %d CreateVolume answered before ctrl was killed", len(ids), n)

	startCtrl(t, "ctrl-2", stateDir, "", addrs)
	// A client retries what it did not hear back about, with the same
	// command_id; what was answered replays the same Volume.
	for i := 0; i < n; i++ {
		cmdID := fmt.Sprintf("restart-%02d", i)
		volID, err := createVolume(client, cmdID)
		if err != nil {
			t.Fatalf("retry %s: %v", cmdID, err)
		}
		if before, ok := ids[cmdID]; ok && before != volID {
			t.Errorf("%s answered %s before the kill and %s after", cmdID, before, volID)
		}
		ids[cmdID] = volID
	}
	waitUntil(t, "every Volume AVAILABLE", 2*time.Minute, func() bool { return len(availableVolumes(t, client)) == n })
	checkExactlyOnce(t, ids, poolDir, nodeProc.stderr)
}

// Two ctrl processes on one PostgreSQL database share the work: commands
// admitted on either complete, and no operation runs twice.
func TestTwoCtrlsOnOnePostgresDoNotRunWorkTwice(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	poolDir := t.TempDir()
	a, b := newCtrlAddrs(t), newCtrlAddrs(t)
	stateA, stateB := t.TempDir(), t.TempDir()
	startCtrl(t, "ctrl-a", stateA, dsn, a)
	startCtrl(t, "ctrl-b", stateB, dsn, b)
	cfgA, cfgB := ctrlConfig(t, stateA), ctrlConfig(t, stateB)
	// The node holds its session on ctrl-a only; ctrl-b's work reaches it
	// through the node operations they share in the database.
	nodeProc := startNode(t, "node-a", a.node, enrollGrant(t, cfgA, "node-a"), t.TempDir(), "shared="+poolDir+",default")
	waitUntil(t, "node-a READY", time.Minute, func() bool { return nodeReady(cfgB, "node-a") })
	givePoolCapacity(t, cfgB, "shared")

	const n = 30
	clients := []ctrlv1connect.VolumeServiceClient{volumeClient(cfgA, a.workspace), volumeClient(cfgB, b.workspace)}
	ids := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cmdID := fmt.Sprintf("pair-%02d", i)
			volID, err := createVolume(clients[i%2], cmdID)
			if err != nil {
				t.Errorf("%s: %v", cmdID, err)
				return
			}
			// The same command sent to the other replica is a replay.
			again, err := createVolume(clients[(i+1)%2], cmdID)
			if err != nil || again != volID {
				t.Errorf("%s replayed on the other replica: %s, %v; want %s", cmdID, again, err, volID)
			}
			mu.Lock()
			ids[cmdID] = volID
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	waitUntil(t, "every Volume AVAILABLE", 2*time.Minute, func() bool { return len(availableVolumes(t, clients[1])) == n })
	checkExactlyOnce(t, ids, poolDir, nodeProc.stderr)
}
