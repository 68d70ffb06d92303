package cli_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/cli"
	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/testenv"
)

// `kibotos sim` brings its simulated nodes to READY under sim-… ids, gives
// the shared pool a capacity, and ends cleanly when interrupted.
func TestSimCommand(t *testing.T) {
	c := testenv.New(t)
	t.Setenv(clientconfig.EnvConfig, filepath.Join(t.TempDir(), "none.env"))
	t.Setenv(clientconfig.EnvOperatorEndpoint, c.Ctrl.Client.OperatorEndpoint)
	t.Setenv(clientconfig.EnvOperatorToken, c.Ctrl.Client.OperatorToken)
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	var stdout, stderr strings.Builder
	exit := make(chan int, 1)
	go func() {
		exit <- cli.Main(ctx, []string{"sim", "--ctrl", c.Ctrl.NodeEndpoint, "--nodes", "5", "--name", "cli"}, &stdout, &stderr)
	}()
	for i := 1; i <= 5; i++ {
		c.WaitStatus(t, fmt.Sprintf("sim-cli-%05d", i), operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY)
	}
	testenv.WaitFor(t, "the shared pool's capacity", func() bool {
		got, err := c.Nodes.GetStoragePool(context.Background(), connect.NewRequest(&operatorv1.GetStoragePoolRequest{StoragePool: "sim-shared"}))
		return err == nil && got.Msg.GetPool().CapacityBytes != nil
	})
	interrupt()
	if code := <-exit; code != 0 {
		t.Fatalf("kibotos sim: exit %d\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "simulated fleet stopped") {
		t.Errorf("kibotos sim did not say it stopped:\n%s", stderr.String())
	}
}
