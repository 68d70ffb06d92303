package ctrl_test

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
)

// call sends an empty request for procedure to endpoint with a bearer
// token, as JSON, and returns the Connect code of the answer. An endpoint
// that does not serve procedure answers unimplemented; one that serves it
// answers something else (the empty request is bad input to most methods).
func call(endpoint, procedure, token string) connect.Code {
	client := connect.NewClient[emptypb.Empty, emptypb.Empty](http.DefaultClient, endpoint+procedure, connect.WithProtoJSON())
	req := connect.NewRequest(&emptypb.Empty{})
	req.Header().Set("Authorization", "Bearer "+token)
	_, err := client.CallUnary(context.Background(), req)
	return connect.CodeOf(err)
}

// NodeRegistrationService is operator-only: every one of its methods is
// served on the Operator endpoint and none on the Native Workspace
// endpoint (nor on the nodes' endpoint), whichever key asks.
func TestNodeRegistrationServiceIsNeverMountedOnTheWorkspaceEndpoint(t *testing.T) {
	srv := start(t, t.TempDir())
	defer srv.Close()
	service := operatorv1.File_kibotos_operator_v1_node_registration_proto.Services().ByName("NodeRegistrationService")
	methods := service.Methods()
	if methods.Len() != 20 {
		t.Fatalf("NodeRegistrationService has %d methods, want the reference's 20", methods.Len())
	}
	for i := range methods.Len() {
		procedure := "/" + string(service.FullName()) + "/" + string(methods.Get(i).Name())
		if got := call(srv.Client.OperatorEndpoint, procedure, srv.Client.OperatorToken); got == connect.CodeUnimplemented {
			t.Errorf("%s is not served on the Operator endpoint", procedure)
		}
		for _, token := range []string{srv.Client.Token, srv.Client.OperatorToken} {
			if got := call(srv.Client.WorkspaceEndpoint, procedure, token); got != connect.CodeUnimplemented {
				t.Errorf("%s on the Native Workspace endpoint: %v, want unimplemented (not mounted)", procedure, got)
			}
		}
		if got := call(srv.NodeEndpoint, procedure, srv.Client.OperatorToken); got != connect.CodeUnimplemented {
			t.Errorf("%s on the node endpoint: %v, want unimplemented (not mounted)", procedure, got)
		}
	}
}
