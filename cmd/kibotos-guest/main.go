// Command kibotos-guest is the first process of every Workspace VM: as PID 1
// it is the guest's init and agent (see internal/guest). Run by hand (not
// PID 1) it is the agent alone, serving on -port or $KIBOTOS_GUEST_PORT: a
// virtio-serial device path, or unix:PATH to listen on a unix socket.
//
// Build it static: CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' ./cmd/kibotos-guest
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/kibotos/kibotos/internal/guest"
	"github.com/kibotos/kibotos/internal/version"
)

func main() {
	if os.Getpid() == 1 {
		guest.RunInit(version.String()) // never returns
	}
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("kibotos-guest", flag.ContinueOnError)
	port := fs.String("port", os.Getenv("KIBOTOS_GUEST_PORT"), "where to serve the agent: a virtio-serial device path, or unix:PATH (default $KIBOTOS_GUEST_PORT)")
	bootID := fs.String("boot-id", os.Getenv("KIBOTOS_GUEST_BOOT_ID"), "the boot id to report (default $KIBOTOS_GUEST_BOOT_ID, else the kernel's)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println(version.String())
		return 0
	}
	if *port == "" {
		fmt.Fprintln(os.Stderr, "kibotos-guest: not PID 1, so -port or KIBOTOS_GUEST_PORT must say where to serve the agent")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := log.New(os.Stderr, guest.LogPrefix, log.LstdFlags)
	if err := guest.RunStandalone(ctx, *port, *bootID, version.String(), logger); err != nil {
		logger.Print(err)
		return 1
	}
	return 0
}
