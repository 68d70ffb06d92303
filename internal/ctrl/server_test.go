package ctrl_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/ctrl"
)

func start(t *testing.T, stateDir string) *ctrl.Server {
	t.Helper()
	srv, err := ctrl.Start(context.Background(), ctrl.Config{
		WorkspaceListen: "127.0.0.1:0", OperatorListen: "127.0.0.1:0", NodeListen: "127.0.0.1:0",
		StateDir: stateDir,
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func listNodes(ctx context.Context, endpoint, token string) error {
	client := operatorv1connect.NewNodeRegistrationServiceClient(http.DefaultClient, endpoint)
	req := connect.NewRequest(&operatorv1.ListNodeRegistrationsRequest{})
	if token != "" {
		req.Header().Set("Authorization", "Bearer "+token)
	}
	_, err := client.ListNodeRegistrations(ctx, req)
	return err
}

func TestCredentialsAreMadeOnceAndCheckedByScope(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	srv := start(t, dir)
	first := srv.Client
	if first.Token == "" || first.OperatorToken == "" || first.Token == first.OperatorToken {
		t.Fatalf("credentials: %+v", first)
	}
	if !srv.NewKeys {
		t.Error("the first start does not say it made the keys")
	}
	written, err := clientconfig.ReadEnvFile(ctrl.EndpointsFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	if written[clientconfig.EnvOperatorToken] != first.OperatorToken || written[clientconfig.EnvOperatorEndpoint] != first.OperatorEndpoint {
		t.Errorf("endpoints.env = %v, want the server's %+v", written, first)
	}

	for _, tc := range []struct {
		name  string
		token string
		want  connect.Code
	}{
		{"no key", "", connect.CodeUnauthenticated},
		{"unknown key", "kbt_nope", connect.CodeUnauthenticated},
		{"workspace key on the operator endpoint", first.Token, connect.CodePermissionDenied},
	} {
		if got := connect.CodeOf(listNodes(ctx, first.OperatorEndpoint, tc.token)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if err := listNodes(ctx, first.OperatorEndpoint, first.OperatorToken); err != nil {
		t.Errorf("operator key: %v", err)
	}
	srv.Close()

	// A restart keeps the keys it already handed out.
	again := start(t, dir)
	defer again.Close()
	if again.Client.Token != first.Token || again.Client.OperatorToken != first.OperatorToken || again.NewKeys {
		t.Errorf("restart made new credentials (NewKeys %v)", again.NewKeys)
	}
	if err := listNodes(ctx, again.Client.OperatorEndpoint, first.OperatorToken); err != nil {
		t.Errorf("old operator key after restart: %v", err)
	}
}

func TestBusyListenerFailsStart(t *testing.T) {
	srv := start(t, t.TempDir())
	defer srv.Close()
	_, err := ctrl.Start(context.Background(), ctrl.Config{
		WorkspaceListen: srv.Client.WorkspaceEndpoint[len("http://"):], OperatorListen: "127.0.0.1:0", NodeListen: "127.0.0.1:0",
		StateDir: t.TempDir(),
	})
	if err == nil {
		t.Fatal("second ctrl on the same workspace address started")
	}
}

// The node endpoint takes HTTP/2 frames of at most 64 KiB (what a node's
// Go client sizes its stream buffers by); the others Go's default, 1 MiB.
func TestTheNodeEndpointTakesFramesOf64KiB(t *testing.T) {
	srv := start(t, t.TempDir())
	defer srv.Close()
	for _, tc := range []struct {
		endpoint string
		want     uint32
	}{
		{srv.NodeEndpoint, 64 << 10},
		{srv.Client.WorkspaceEndpoint, 1 << 20},
		{srv.Client.OperatorEndpoint, 1 << 20},
	} {
		if got := maxFrameSize(t, tc.endpoint); got != tc.want {
			t.Errorf("%s: SETTINGS_MAX_FRAME_SIZE %d, want %d", tc.endpoint, got, tc.want)
		}
	}
}

// maxFrameSize opens a cleartext HTTP/2 connection to endpoint (http://)
// and returns the largest frame its server says it takes: its first
// SETTINGS frame's MAX_FRAME_SIZE, 16 KiB when it names none.
func maxFrameSize(t *testing.T, endpoint string) uint32 {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(endpoint, "http://"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		settings, ok := f.(*http2.SettingsFrame)
		if !ok || settings.IsAck() {
			continue
		}
		if v, ok := settings.Value(http2.SettingMaxFrameSize); ok {
			return v
		}
		return 16 << 10
	}
}
