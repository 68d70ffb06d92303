package ctrl_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/ctrl/catalog"
)

// zeros is a request body of n zero bytes made as it is read, counting
// what the transport took from it.
type zeros struct {
	left int64
	read atomic.Int64
}

func (z *zeros) Read(p []byte) (int, error) {
	if z.left <= 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), z.left))
	clear(p[:n])
	z.left -= int64(n)
	z.read.Add(int64(n))
	return n, nil
}

// postProto sends body as a Connect unary protobuf request.
func postProto(t *testing.T, url, token string, body io.Reader, size int64) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/proto")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer res.Body.Close()
	answer, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(answer)
}

// A call without a valid credential is refused from its headers: ctrl
// reads (next to) nothing of its body, however large. The 300 MiB
// GetVolume took ctrl from 1.5 to 2.2 GiB before its 401.
func TestUnauthenticatedBodiesAreRefusedUnread(t *testing.T) {
	srv := start(t, t.TempDir())
	defer srv.Close()
	const size = 300 << 20
	for _, tc := range []struct {
		name, url, token string
		status           int
	}{
		{"no credential, workspace endpoint", srv.Client.WorkspaceEndpoint + "/kibotos.ctrl.v1.VolumeService/GetVolume", "", http.StatusUnauthorized},
		{"unknown key, workspace endpoint", srv.Client.WorkspaceEndpoint + "/kibotos.ctrl.v1.VolumeService/GetVolume", "kbt_nope", http.StatusUnauthorized},
		{"unknown session token, a data-plane call", srv.Client.WorkspaceEndpoint + "/kibotos.ctrl.v1.FileService/StatFile", "kbt_nope", http.StatusUnauthorized},
		{"no credential, operator endpoint", srv.Client.OperatorEndpoint + "/kibotos.operator.v1.NodeRegistrationService/ListNodeRegistrations", "", http.StatusUnauthorized},
		{"a workspace key, operator endpoint", srv.Client.OperatorEndpoint + "/kibotos.operator.v1.NodeRegistrationService/ListNodeRegistrations", srv.Client.Token, http.StatusForbidden},
		{"no node credential, node endpoint", srv.NodeEndpoint + "/kibotos.node.v1.NodeSessionService/FetchArtifact", "", http.StatusUnauthorized},
		{"an unknown node credential, node endpoint", srv.NodeEndpoint + "/kibotos.node.v1.NodeSessionService/FetchArtifact", "kbt_nope", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &zeros{left: size}
			status, answer := postProto(t, tc.url, tc.token, body, size)
			if status != tc.status || !strings.Contains(answer, `"code":"`) {
				t.Errorf("answer %d %s, want %d with a Connect error", status, answer, tc.status)
			}
			// What the client wrote before the server closed: socket
			// buffers, not the body.
			if n := body.read.Load(); n > 32<<20 {
				t.Errorf("the client sent %d MiB of the %d MiB body before the refusal", n>>20, size>>20)
			}
		})
	}
}

// An authenticated message over the limit is resource_exhausted naming
// the limit, unary and in a stream; the default limit passes an upload's
// largest chunk (catalog.MaxChunk).
func TestOversizedMessagesAreResourceExhausted(t *testing.T) {
	const limit = 1 << 20
	srv, err := ctrl.Start(context.Background(), ctrl.Config{
		WorkspaceListen: "127.0.0.1:0", OperatorListen: "127.0.0.1:0", NodeListen: "127.0.0.1:0",
		StateDir: t.TempDir(), MaxMessageBytes: limit,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	size := int64(2 * limit)
	status, answer := postProto(t, srv.Client.WorkspaceEndpoint+"/kibotos.ctrl.v1.VolumeService/GetVolume", srv.Client.Token, &zeros{left: size}, size)
	if !strings.Contains(answer, `"code":"resource_exhausted"`) || !strings.Contains(answer, fmt.Sprint(limit)) {
		t.Errorf("a 2 MiB GetVolume: %d %s, want resource_exhausted naming %d", status, answer, limit)
	}

	if err := upload(srv, 2*limit); connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), fmt.Sprint(limit)) {
		t.Errorf("a 2 MiB upload chunk: %v, want resource_exhausted naming %d", err, limit)
	}
	if err := upload(srv, limit/2); err != nil {
		t.Errorf("a chunk under the limit: %v", err)
	}

	def := start(t, t.TempDir())
	defer def.Close()
	if err := upload(def, catalog.MaxChunk); err != nil {
		t.Errorf("a %d byte chunk under the default limit: %v", catalog.MaxChunk, err)
	}
}

// upload streams one chunk of n bytes as a template source.
func upload(srv *ctrl.Server, n int) error {
	client := operatorv1connect.NewTemplateCatalogServiceClient(http.DefaultClient, srv.Client.OperatorEndpoint)
	stream := client.UploadTemplateSource(context.Background())
	stream.RequestHeader().Set("Authorization", "Bearer "+srv.Client.OperatorToken)
	chunk := bytes.Repeat([]byte{'k'}, n)
	sum := sha256.Sum256(chunk)
	_ = stream.Send(&operatorv1.UploadTemplateSourceRequest{Part: &operatorv1.UploadTemplateSourceRequest_Header{Header: &operatorv1.TemplateSourceUploadHeader{
		Command: &ctrlv1.CommandMetadata{CommandId: fmt.Sprintf("upload-%d", n)}, Digest: "sha256:" + hex.EncodeToString(sum[:]), SizeBytes: uint64(n),
	}}})
	_ = stream.Send(&operatorv1.UploadTemplateSourceRequest{Part: &operatorv1.UploadTemplateSourceRequest_Chunk{Chunk: chunk}})
	_, err := stream.CloseAndReceive()
	return err
}
