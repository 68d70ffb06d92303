package api_test

// session.proto: "The credential is checked when a call starts: a stream
// that started with a valid token runs on after the token expires, and
// ends when the session is revoked". A stream that gets past the check
// needs a guest, which needs a VM (test/e2e checkRevocationEndsStreams);
// here the guard is wired as ctrl wires it, on dpEnv's SessionService and
// store, in front of a ProcessService whose ExecProcess stands in for a
// long process: it writes what the test sends it until the call ends.

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/testenv"
)

type longProcess struct {
	ctrlv1connect.UnimplementedProcessServiceHandler
	write chan string
}

func (p longProcess) ExecProcess(ctx context.Context, _ *connect.Request[ctrlv1.ExecProcessRequest], stream *connect.ServerStream[ctrlv1.ExecProcessResponse]) error {
	if err := stream.Send(&ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Started{Started: &ctrlv1.ProcessStarted{ProcessId: "p-1"}}}); err != nil {
		return err
	}
	for {
		select {
		case data := <-p.write:
			if err := stream.Send(&ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Output{Output: &ctrlv1.ProcessOutputChunk{Data: []byte(data)}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			// What a relay answers when its call to the guest is cancelled.
			return connect.NewError(connect.CodeCanceled, ctx.Err())
		}
	}
}

// longProcesses serves p behind e's guard; it returns the ProcessService
// client of token.
func (e *dpEnv) longProcesses(t *testing.T, p longProcess, token string) ctrlv1connect.ProcessServiceClient {
	t.Helper()
	keys := &auth.Keyring{}
	mux := http.NewServeMux()
	mux.Handle(ctrlv1connect.NewProcessServiceHandler(p, connect.WithInterceptors(e.sess.Interceptor(keys))))
	srv := testenv.H2CServer(t, auth.Gate(mux, e.sess.Gate(keys)))
	return ctrlv1connect.NewProcessServiceClient(e.client(token), srv.URL)
}

func TestAStreamRunsPastItsTokensExpiryAndEndsWhenItsSessionIsRevoked(t *testing.T) {
	e := newDPEnv(t)
	s := e.issue(t, time.Minute)
	p := longProcess{write: make(chan string)}
	// The deadline bounds a stream the revocation fails to end.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := e.longProcesses(t, p, s.GetToken()).ExecProcess(ctx, connect.NewRequest(&ctrlv1.ExecProcessRequest{WorkspaceId: "ws-1"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStarted() == nil {
		t.Fatalf("the stream did not start: %v", stream.Err())
	}
	e.advance(time.Minute)
	e.expired(t, "a new call with the token", s.GetToken())
	p.write <- "after expiry"
	if !stream.Receive() || string(stream.Msg().GetOutput().GetData()) != "after expiry" {
		t.Fatalf("the stream did not run on after its token expired: %v", stream.Err())
	}
	if err := e.revoke(e.key, "ws-1", s.GetSessionId()); err != nil {
		t.Fatal(err)
	}
	if stream.Receive() {
		t.Fatalf("the stream sent %v after its session was revoked", stream.Msg())
	}
	// It ends as a call with the token would now be refused.
	wantDetail(t, "the stream's end", stream.Err(), connect.CodeUnauthenticated,
		ctrlv1.FailureReason_FAILURE_REASON_SESSION_REVOKED, ctrlv1.FailureStage_FAILURE_STAGE_AUTHORIZING_DATA_PLANE)
}
