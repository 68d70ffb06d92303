package fleet

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// Operation is one node operation a command step needs.
type Operation struct {
	// Name tells this operation from the command's others ("ensure").
	Name string
	// Pool is the storage pool the node must reach.
	Pool string
	// Body is the typed operation (kibotos.node.v1).
	Body proto.Message
	// Stage is where a failure is reported.
	Stage ctrlv1.FailureStage
	// Succeeded writes the command's effect once the node answered success.
	Succeeded func(tx *store.Tx, result *anypb.Any) error
	// Failed writes what a failure leaves behind.
	Failed func(tx *store.Tx, failure *ctrlv1.WorkspaceFailure) error
}
