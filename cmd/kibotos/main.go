// Command kibotos is the one Kibotos binary: the control plane (ctrl), the
// node agent (node), the all-in-one development system (dev) and the CLI.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kibotos/kibotos/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
