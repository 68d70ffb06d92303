package api_test

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/reflect/protoreflect"

	// The guest's files are linked into ctrl (its data plane calls the
	// guest agent): reflection must not serve them either.
	_ "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/internal/ctrl/api"
)

// Each endpoint's reflection describes only what it mounts: a service of
// another endpoint, or the guest agent's, is not found by symbol, and its
// file is not served by name, though every one is linked into ctrl.
func TestReflectionServesOnlyTheEndpointsOwnServices(t *testing.T) {
	const (
		workspace = "kibotos.ctrl.v1.WorkspaceService"
		operator  = "kibotos.operator.v1.NodeRegistrationService"
		node      = "kibotos.node.v1.NodeSessionService"
		guest     = "kibotos.guest.v1.GuestAgentService"
	)
	for _, tc := range []struct {
		name    string
		handler http.Handler
		own     string
		foreign []string
		// absent files are no import of the endpoint's; imported ones are.
		absent, imported []string
		ownFile          string
	}{
		{"workspace", api.NewWorkspaceHandler(newBackend(t)), workspace, []string{operator, node, guest},
			[]string{"kibotos/operator/v1/node_registration.proto", "kibotos/node/v1/session.proto", "kibotos/guest/v1/agent.proto"}, nil, ""},
		{"operator", api.NewOperatorHandler(newBackend(t)), operator, []string{workspace, node, guest},
			[]string{"kibotos/node/v1/session.proto", "kibotos/guest/v1/agent.proto"}, []string{"kibotos/ctrl/v1/workspace.proto"}, "kibotos/operator/v1/node_registration.proto"},
		{"node", api.NewNodeHandler(newBackend(t)), node, []string{workspace, operator, guest},
			[]string{"kibotos/operator/v1/node_registration.proto", "kibotos/ctrl/v1/workspace.proto"},
			[]string{"kibotos/guest/v1/agent.proto", "kibotos/ctrl/v1/egress.proto"}, "kibotos/node/v1/session.proto"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, tc.handler)
			stream := grpcreflect.NewClient(srv.Client(), srv.URL).NewStream(context.Background())
			defer stream.Close()
			if _, err := stream.FileContainingSymbol(protoreflect.FullName(tc.own)); err != nil {
				t.Errorf("its own %s: %v", tc.own, err)
			}
			for _, s := range tc.foreign {
				if files, err := stream.FileContainingSymbol(protoreflect.FullName(s)); err == nil {
					t.Errorf("fileContainingSymbol(%s) answered %d files, want not found", s, len(files))
				}
			}
			for _, file := range tc.absent {
				if _, err := stream.FileByFilename(file); err == nil {
					t.Errorf("fileByFilename(%s) answered, want not found", file)
				}
			}
			// A file another one imports is served for its messages, without
			// its services.
			for _, file := range tc.imported {
				fds, err := stream.FileByFilename(file)
				if err != nil || len(fds) == 0 {
					t.Errorf("fileByFilename(%s), an import of a mounted service's file: %v", file, err)
					continue
				}
				for _, fd := range fds {
					if len(fd.GetService()) > 0 && fd.GetName() != tc.ownFile {
						t.Errorf("%s is served with its service %s, which is not mounted here", fd.GetName(), fd.GetService()[0].GetName())
					}
				}
				if fds[0].GetName() != file {
					t.Errorf("fileByFilename(%s) answered %s first", file, fds[0].GetName())
				}
			}
		})
	}
}
