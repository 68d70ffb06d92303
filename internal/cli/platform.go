package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/platform"
	"github.com/kibotos/kibotos/internal/version"
)

// platformClient is a client of PlatformCatalogService; it uploads over
// HTTP/2 (see uploadHTTP).
func platformClient() (operatorv1connect.PlatformCatalogServiceClient, error) {
	return onOperatorForUploads(operatorv1connect.NewPlatformCatalogServiceClient)
}

var platformKeyHeader = []string{"PLATFORM_KEY", "DEFAULT_LAUNCH", "LAUNCHES", "VERSION", "DEPLOYMENT_DEFAULT"}

func platformKeyRow(k *operatorv1.PlatformKey) []string {
	return []string{k.GetPlatformKey(), k.GetDefaultLaunchRef(), strconv.FormatUint(uint64(k.GetLaunchCount()), 10),
		strconv.FormatUint(k.GetVersion(), 10), strconv.FormatBool(k.GetDeploymentDefault())}
}

var launchHeader = []string{"LAUNCH", "PLATFORM_KEY", "REVISION", "DEFAULT", "VMM", "DESCRIPTION"}

func launchRow(l *operatorv1.Launch) []string {
	return []string{l.GetLaunchRef(), l.GetPlatformKey(), strconv.FormatUint(l.GetRevision(), 10), strconv.FormatBool(l.GetIsDefault()),
		trimEnum(l.GetSpec().GetVmm().String(), "VMM_KIND_"), l.GetDescription()}
}

// platformBuild is what `kibotos platform build` does; `kibotos dev` uses
// it for its default platform.
type platformBuild struct {
	key, deb, guest, cache, commandID string
	setDefault                        bool
}

// run builds the platform here (downloading Debian's kernel package unless
// deb names one), uploads its kernel and initramfs, creates the key when
// missing and adds a Launch.
func (b *platformBuild) run(ctx context.Context, client operatorv1connect.PlatformCatalogServiceClient, progress io.Writer) (*operatorv1.Launch, error) {
	guest := b.guest
	if guest == "" {
		var err error
		if guest, err = guestBinary(); err != nil {
			return nil, err
		}
	}
	deb := b.deb
	if deb == "" {
		var err error
		if deb, err = platform.DownloadDebianKernel(ctx, b.cache, progressPrinter(progress, "kernel package")); err != nil {
			return nil, err
		}
	}
	work, err := os.MkdirTemp(b.cache, "platform-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	m, err := platform.Build(ctx, platform.BuildInput{KernelDeb: deb, GuestBinary: guest, Progress: progressPrinter(progress, "platform")}, work)
	if err != nil {
		return nil, err
	}
	spec := &operatorv1.LaunchSpec{Vmm: operatorv1.VmmKind_VMM_KIND_QEMU, Architecture: runtime.GOARCH, GuestAgentVersion: version.String()}
	for _, a := range []struct {
		file string
		into **operatorv1.PlatformArtifact
	}{{m.Vmlinux, &spec.Kernel}, {m.Initramfs, &spec.Initramfs}} {
		if *a.into, err = uploadPlatformArtifact(ctx, client, filepath.Join(work, a.file), progress); err != nil {
			return nil, err
		}
	}
	if _, err := client.GetPlatformKey(ctx, connect.NewRequest(&operatorv1.GetPlatformKeyRequest{PlatformKey: b.key})); connect.CodeOf(err) == connect.CodeNotFound {
		if _, err := client.CreatePlatformKey(ctx, connect.NewRequest(&operatorv1.CreatePlatformKeyRequest{Command: newCommandMetadata(""), PlatformKey: b.key})); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	res, err := client.CreateLaunch(ctx, connect.NewRequest(&operatorv1.CreateLaunchRequest{
		Command: newCommandMetadata(b.commandID), PlatformKey: b.key, Spec: spec, SetDefault: b.setDefault,
		Description: "kernel " + m.KernelVersion,
	}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetLaunch(), nil
}

func uploadPlatformArtifact(ctx context.Context, client operatorv1connect.PlatformCatalogServiceClient, path string, progress io.Writer) (*operatorv1.PlatformArtifact, error) {
	digest, size, err := fileDigest(path)
	if err != nil {
		return nil, err
	}
	stream := client.UploadPlatformArtifact(ctx)
	if err := stream.Send(&operatorv1.UploadPlatformArtifactRequest{Part: &operatorv1.UploadPlatformArtifactRequest_Header{Header: &operatorv1.PlatformArtifactUploadHeader{
		Command: newCommandMetadata(""), Digest: digest, SizeBytes: size,
	}}}); err == nil {
		if err := sendFile(path, size, progressPrinter(progress, filepath.Base(path)), func(chunk []byte) error {
			return stream.Send(&operatorv1.UploadPlatformArtifactRequest{Part: &operatorv1.UploadPlatformArtifactRequest_Chunk{Chunk: chunk}})
		}); err != nil {
			return nil, err
		}
	}
	res, err := stream.CloseAndReceive()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "%s uploaded: %s\n", filepath.Base(path), res.Msg.GetArtifact().GetDigest())
	return res.Msg.GetArtifact(), nil
}

func newPlatformCommand(out *outputFlag) *cobra.Command {
	c := &cobra.Command{Use: "platform", Short: "Build and manage Platforms (kernel, initramfs, VMM) and their Launch revisions"}
	var b platformBuild
	build := &cobra.Command{
		Use:   "build",
		Short: "Build a platform from Debian's kernel package and add it as a Launch of a PlatformKey",
		Long: `build makes a platform here: the kernel of a Debian linux-image package (--deb,
or Debian's current one, downloaded), and a reproducible initramfs with
kibotos-guest and the kernel modules the guest needs. It uploads both to ctrl,
creates the PlatformKey when missing and adds a Launch (the key's default if
it is the first, or with --set-default). Progress goes to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := platformClient()
			if err != nil {
				return err
			}
			if b.cache == "" {
				b.cache = filepath.Join(os.TempDir(), "kibotos-platform-cache")
			}
			if err := os.MkdirAll(b.cache, 0o755); err != nil {
				return err
			}
			l, err := b.run(cmd.Context(), client, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), l, launchHeader, [][]string{launchRow(l)})
		},
	}
	f := build.Flags()
	f.StringVar(&b.key, "key", "default", "the PlatformKey to add the Launch to (created when missing)")
	f.StringVar(&b.deb, "deb", "", "a linux-image-*.deb to build from (default: download Debian's)")
	f.StringVar(&b.guest, "guest", "", "the kibotos-guest binary (default: $KIBOTOS_GUEST, or next to this executable)")
	f.StringVar(&b.cache, "cache", os.Getenv("KIBOTOS_CACHE"), "where downloads and the build's work go")
	f.BoolVar(&b.setDefault, "set-default", false, "make the Launch its key's default (the first one is anyway)")
	f.StringVar(&b.commandID, "command-id", "", "command_id of the CreateLaunch (retrying with the same id is safe)")

	list := &cobra.Command{
		Use: "list", Short: "List PlatformKeys", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := platformClient()
			if err != nil {
				return err
			}
			all, err := everyPage((*operatorv1.ListPlatformKeysResponse).GetPlatformKeys, func(token string) (*connect.Response[operatorv1.ListPlatformKeysResponse], error) {
				return client.ListPlatformKeys(cmd.Context(), connect.NewRequest(&operatorv1.ListPlatformKeysRequest{PageSize: listPage, PageToken: token}))
			})
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), &operatorv1.ListPlatformKeysResponse{PlatformKeys: all}, platformKeyHeader, rowsOf(all, platformKeyRow))
		},
	}
	get := &cobra.Command{
		Use: "get PLATFORM_KEY", Short: "Show a PlatformKey's Launches, newest first", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := platformClient()
			if err != nil {
				return err
			}
			all, err := everyPage((*operatorv1.ListLaunchesResponse).GetLaunches, func(token string) (*connect.Response[operatorv1.ListLaunchesResponse], error) {
				return client.ListLaunches(cmd.Context(), connect.NewRequest(&operatorv1.ListLaunchesRequest{PlatformKey: args[0], PageSize: listPage, PageToken: token}))
			})
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), &operatorv1.ListLaunchesResponse{Launches: all}, launchHeader, rowsOf(all, launchRow))
		},
	}
	c.AddCommand(build, list, get)
	return c
}
