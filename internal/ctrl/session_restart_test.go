package ctrl_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
)

// session.proto: "ctrl stores only a hash of each token, durably, so
// sessions survive a ctrl restart." A session issued by one ctrl works on
// the next one on the same database, whose own API key can revoke it; on
// SQLite the database's files hold the token's hash and never the token.
func TestASessionSurvivesACtrlRestart(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			dsn := b.DSN(t)
			first := testenv.New(t, testenv.OnDatabase(dsn))
			// A running Workspace's record, as its node would have made it
			// AVAILABLE: this ctrl has no node.
			if err := first.Ctrl.Store().Tx(context.Background(), func(tx *store.Tx) error {
				return tx.PutWorkspace(&ctrlv1.Workspace{WorkspaceId: "ws-1", State: ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE, Generation: 1})
			}); err != nil {
				t.Fatal(err)
			}
			res, err := sessionsOf(first, first.Ctrl.Client.Token).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: "ws-1"}))
			if err != nil {
				t.Fatal(err)
			}
			s := res.Msg.GetSession()
			first.Ctrl.Close()
			if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
				checkOnlyTheHashIsStored(t, filepath.Dir(path), s.GetToken())
			}

			second := testenv.New(t, testenv.OnDatabase(dsn))
			if _, err := sessionsOf(second, s.GetToken()).RotateDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.RotateDataPlaneSessionRequest{
				WorkspaceId: "ws-1", SessionId: s.GetSessionId()})); err != nil {
				t.Errorf("the session's token after a restart: %v", err)
			}
			if _, err := sessionsOf(second, second.Ctrl.Client.Token).RevokeDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.RevokeDataPlaneSessionRequest{
				WorkspaceId: "ws-1", SessionId: s.GetSessionId()})); err != nil {
				t.Errorf("revoking the session on the restarted ctrl: %v", err)
			}
			_, err = sessionsOf(second, s.GetToken()).RotateDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.RotateDataPlaneSessionRequest{
				WorkspaceId: "ws-1", SessionId: s.GetSessionId()}))
			if apierr.DetailOf(err).GetReason() != ctrlv1.FailureReason_FAILURE_REASON_SESSION_REVOKED {
				t.Errorf("the revoked session's token: %v, want SESSION_REVOKED", err)
			}
		})
	}
}

func sessionsOf(c *testenv.Cluster, token string) ctrlv1connect.SessionServiceClient {
	return ctrlv1connect.NewSessionServiceClient(http.DefaultClient, c.Ctrl.Client.WorkspaceEndpoint, connect.WithInterceptors(auth.Bearer(token)))
}

// checkOnlyTheHashIsStored reads every file of a closed SQLite database
// (its journal too): the token's hash is there, the token is not.
func checkOnlyTheHashIsStored(t *testing.T, dir, token string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, data...)
	}
	if !bytes.Contains(all, []byte(auth.HashToken(token))) {
		t.Errorf("the database in %s does not hold the token's hash: the test reads the wrong files", dir)
	}
	if bytes.Contains(all, []byte(token)) {
		t.Errorf("the database holds a session's token")
	}
}
