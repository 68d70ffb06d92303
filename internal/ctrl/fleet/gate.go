package fleet

import (
	"context"
	"net/http"

	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
)

// Gate is the node endpoint's check before a body is read (auth.Gate):
// every call but Enroll, whose enrollment grant is in its body, needs the
// node's credential and id in its headers. The handlers check again.
func (f *Fleet) Gate() auth.Check {
	return func(ctx context.Context, procedure string, header http.Header) error {
		if procedure == nodev1connect.NodeSessionServiceEnrollProcedure {
			return nil
		}
		_, err := f.authenticate(ctx, header.Get("Authorization"), header.Get(HeaderNodeID))
		return err
	}
}
