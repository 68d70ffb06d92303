package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/template"
)

// templateClient is a client of TemplateCatalogService; it uploads over
// HTTP/2 (see uploadHTTP).
func templateClient() (operatorv1connect.TemplateCatalogServiceClient, error) {
	return onOperatorForUploads(operatorv1connect.NewTemplateCatalogServiceClient)
}

var templateHeader = []string{"TEMPLATE", "DEFAULT_REVISION", "REVISIONS", "VERSION", "DEPLOYMENT_DEFAULT"}

func templateRow(t *operatorv1.Template) []string {
	return []string{t.GetTemplate(), t.GetDefaultRevision(), strconv.FormatUint(uint64(t.GetRevisionCount()), 10),
		strconv.FormatUint(t.GetVersion(), 10), strconv.FormatBool(t.GetDeploymentDefault())}
}

var revisionHeader = []string{"TEMPLATE", "REVISION", "STATE", "DEFAULT", "IMAGE", "DIGEST"}

// revisionRow's first cell is NAME@REVISION, what --template takes, so
// `template get NAME -q` lists revisions as create and delete name them.
func revisionRow(r *operatorv1.TemplateRevision) []string {
	return []string{r.GetRef().GetTemplate() + "@" + r.GetRef().GetRevision(), r.GetRef().GetRevision(), trimEnum(r.GetState().String(), "TEMPLATE_REVISION_STATE_"),
		strconv.FormatBool(r.GetIsDefault()), showSize(r.GetImageSizeBytes()), r.GetImageDigest()}
}

// templateBuild is what `kibotos template build` does; `kibotos dev` uses
// it for its default template.
type templateBuild struct {
	template, from, revision, platform, imageName, arch, description, commandID string
	size                                                                        sizeFlag
	setDefault                                                                  bool
}

// run uploads the source (a directory is sent as a tar of it), creates the
// Template when missing, admits the revision and follows its build,
// showing progress on progress.
func (b *templateBuild) run(ctx context.Context, client operatorv1connect.TemplateCatalogServiceClient, progress io.Writer) (*operatorv1.TemplateRevision, error) {
	source, cleanup, err := b.source(ctx, client, progress)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if err := ensureTemplate(ctx, client, b.template); err != nil {
		return nil, err
	}
	res, err := client.CreateTemplateRevision(ctx, connect.NewRequest(&operatorv1.CreateTemplateRevisionRequest{
		Command: newCommandMetadata(b.commandID), Template: b.template, Revision: b.revision, Source: source,
		ImageSizeBytes: uint64(b.size), SetDefault: b.setDefault, Description: b.description,
	}))
	if err != nil {
		return nil, err
	}
	return followBuild(ctx, client, res.Msg.GetRevision(), progress)
}

func ensureTemplate(ctx context.Context, client operatorv1connect.TemplateCatalogServiceClient, name string) error {
	_, err := client.GetTemplate(ctx, connect.NewRequest(&operatorv1.GetTemplateRequest{Template: name}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		return err
	}
	_, err = client.CreateTemplate(ctx, connect.NewRequest(&operatorv1.CreateTemplateRequest{Command: newCommandMetadata(""), Template: name}))
	return err
}

// source uploads what --from names, or names the registry image.
func (b *templateBuild) source(ctx context.Context, client operatorv1connect.TemplateCatalogServiceClient, progress io.Writer) (*operatorv1.TemplateSource, func(), error) {
	none := func() {}
	st, err := os.Stat(b.from)
	if os.IsNotExist(err) {
		if !looksLikeImageReference(b.from) {
			return nil, none, fmt.Errorf("--from %s: no such file or directory here (an image reference names its registry or a tag, e.g. docker.io/library/debian:12)", b.from)
		}
		fmt.Fprintf(progress, "%s is no file here: ctrl pulls it from its registry\n", b.from)
		return &operatorv1.TemplateSource{Source: &operatorv1.TemplateSource_OciImage{OciImage: &operatorv1.TemplateOciImageSource{Reference: b.from, Platform: b.platform}}}, none, nil
	}
	if err != nil {
		return nil, none, err
	}
	path, kind := b.from, ""
	if st.IsDir() {
		tmp, err := os.MkdirTemp("", "kibotos-template-")
		if err != nil {
			return nil, none, err
		}
		none = func() { os.RemoveAll(tmp) }
		path = filepath.Join(tmp, "source.tar")
		kind = "rootfs"
		if _, err := os.Stat(filepath.Join(b.from, "oci-layout")); err == nil {
			kind = "oci"
		}
		fmt.Fprintf(progress, "packing %s (%s)\n", b.from, map[string]string{"rootfs": "a root filesystem", "oci": "an OCI image layout"}[kind])
		if err := tarDir(ctx, b.from, path); err != nil {
			return nil, none, err
		}
	} else if kind, err = template.ArchiveKind(path); err != nil {
		return nil, none, err
	}
	digest, err := uploadTemplateSource(ctx, client, path, progress)
	if err != nil {
		return nil, none, err
	}
	if kind == "rootfs" {
		return &operatorv1.TemplateSource{Source: &operatorv1.TemplateSource_Tar{Tar: &operatorv1.TemplateTarSource{UploadDigest: digest, Architecture: b.arch}}}, none, nil
	}
	return &operatorv1.TemplateSource{Source: &operatorv1.TemplateSource_OciArchive{OciArchive: &operatorv1.TemplateOciArchiveSource{
		UploadDigest: digest, Platform: b.platform, ImageName: b.imageName,
	}}}, none, nil
}

// looksLikeImageReference is true for what can only be an image reference:
// a valid reference with a tag or digest (debian:12, app@sha256:…) or a
// registry host (ghcr.io/org/app, localhost:5000/app). A bare word or a
// relative path is taken as a local path that is missing, not pulled.
func looksLikeImageReference(s string) bool {
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~") {
		return false
	}
	if _, err := name.ParseReference(s); err != nil {
		return false
	}
	first, _, hasSlash := strings.Cut(s, "/")
	last := s[strings.LastIndex(s, "/")+1:]
	return strings.Contains(s, "@") || strings.Contains(last, ":") ||
		(hasSlash && (strings.ContainsAny(first, ".:") || first == "localhost"))
}

func uploadTemplateSource(ctx context.Context, client operatorv1connect.TemplateCatalogServiceClient, path string, progress io.Writer) (string, error) {
	digest, size, err := fileDigest(path)
	if err != nil {
		return "", err
	}
	stream := client.UploadTemplateSource(ctx)
	if err := stream.Send(&operatorv1.UploadTemplateSourceRequest{Part: &operatorv1.UploadTemplateSourceRequest_Header{Header: &operatorv1.TemplateSourceUploadHeader{
		Command: newCommandMetadata(""), Digest: digest, SizeBytes: size,
	}}}); err == nil {
		if err := sendFile(path, size, progressPrinter(progress, "source"), func(chunk []byte) error {
			return stream.Send(&operatorv1.UploadTemplateSourceRequest{Part: &operatorv1.UploadTemplateSourceRequest_Chunk{Chunk: chunk}})
		}); err != nil {
			return "", err
		}
	}
	res, err := stream.CloseAndReceive()
	if err != nil {
		return "", err
	}
	fmt.Fprintf(progress, "source uploaded: %s (%d bytes)\n", res.Msg.GetDigest(), res.Msg.GetSizeBytes())
	return res.Msg.GetDigest(), nil
}

// followBuild polls a revision until its build ends, showing each phase.
func followBuild(ctx context.Context, client operatorv1connect.TemplateCatalogServiceClient, r *operatorv1.TemplateRevision, progress io.Writer) (*operatorv1.TemplateRevision, error) {
	p := newProgress(progress)
	defer p.end()
	for {
		what := fmt.Sprintf("build %s/%s: %s", r.GetRef().GetTemplate(), r.GetRef().GetRevision(), trimEnum(r.GetBuild().GetPhase().String(), "TEMPLATE_BUILD_PHASE_"))
		if d := r.GetBuild().GetDoneBytes(); d > 0 {
			p.bytes(what, int64(d), 0)
		} else {
			p.stage(what)
		}
		switch r.GetState() {
		case operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_READY:
			return r, nil
		case operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_BUILDING:
		default:
			return r, fmt.Errorf("revision %s/%s is %s: %s", r.GetRef().GetTemplate(), r.GetRef().GetRevision(),
				trimEnum(r.GetState().String(), "TEMPLATE_REVISION_STATE_"), r.GetFailure())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		res, err := client.GetTemplateRevision(ctx, connect.NewRequest(&operatorv1.GetTemplateRevisionRequest{
			Selector: &ctrlv1.TemplateSelector{Template: r.GetRef().GetTemplate(), Revision: r.GetRef().GetRevision()},
		}))
		if err != nil {
			return nil, err
		}
		r = res.Msg.GetRevision()
	}
}

func newTemplateCommand(out *outputFlag) *cobra.Command {
	c := &cobra.Command{Use: "template", Short: "Build and manage Templates (root filesystem images)"}
	var b templateBuild
	build := &cobra.Command{
		Use:   "build TEMPLATE --from DIR|TAR|OCI_ARCHIVE|OCI_LAYOUT_DIR|IMAGE_REF",
		Short: "Build a Template revision from a directory, a tar, an OCI image (archive, layout or registry)",
		Long: `build sends the source to ctrl, which builds a read-only ext4 root image from
it: a directory (sent as a tar of it) or a tar is the root filesystem; a
docker save / crane tarball, an OCI layout (directory or tar) is an OCI image
whose layers are flattened with their whiteouts applied. A --from that is no
file here is an image reference ctrl pulls from its registry when it looks
like one (it names a registry host, a tag or a digest: debian:12,
ghcr.io/org/app); anything else is a missing path, and an error. The Template is created when
missing. Progress goes to stderr; the revision is printed once READY.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b.template = args[0]
			client, err := templateClient()
			if err != nil {
				return err
			}
			r, err := b.run(cmd.Context(), client, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), r, revisionHeader, [][]string{revisionRow(r)})
		},
	}
	f := build.Flags()
	f.StringVar(&b.from, "from", "", "the source: a directory, a tar, an OCI archive or layout, or an image reference (required)")
	f.StringVar(&b.revision, "revision", "", "the new revision's name (default: the next number)")
	f.BoolVar(&b.setDefault, "set-default", false, "make the revision the Template's default once READY (the first one is anyway)")
	f.StringVar(&b.platform, "platform", "", "os/arch[/variant] of the image to take from a multi-platform source (default: linux and ctrl's architecture)")
	f.StringVar(&b.imageName, "image-name", "", "the image of an archive that holds several (ref name or repo tag)")
	f.StringVar(&b.arch, "arch", "", "the architecture of a directory or tar's content (default: ctrl's)")
	f.Var(&b.size, "size", "image size (512Mi, 2G; a bare number is MiB; default: the content with headroom)")
	f.StringVar(&b.description, "description", "", "free text for operators")
	f.StringVar(&b.commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")
	_ = build.MarkFlagRequired("from")

	list := &cobra.Command{
		Use: "list", Short: "List Templates", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := templateClient()
			if err != nil {
				return err
			}
			all, err := everyPage((*operatorv1.ListTemplatesResponse).GetTemplates, func(token string) (*connect.Response[operatorv1.ListTemplatesResponse], error) {
				return client.ListTemplates(cmd.Context(), connect.NewRequest(&operatorv1.ListTemplatesRequest{PageSize: listPage, PageToken: token}))
			})
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), &operatorv1.ListTemplatesResponse{Templates: all}, templateHeader, rowsOf(all, templateRow))
		},
	}
	get := &cobra.Command{
		Use: "get TEMPLATE", Short: "Show a Template's revisions, newest first", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := templateClient()
			if err != nil {
				return err
			}
			all, err := everyPage((*operatorv1.ListTemplateRevisionsResponse).GetRevisions, func(token string) (*connect.Response[operatorv1.ListTemplateRevisionsResponse], error) {
				return client.ListTemplateRevisions(cmd.Context(), connect.NewRequest(&operatorv1.ListTemplateRevisionsRequest{Template: args[0], PageSize: listPage, PageToken: token}))
			})
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), &operatorv1.ListTemplateRevisionsResponse{Revisions: all}, revisionHeader, rowsOf(all, revisionRow))
		},
	}
	c.AddCommand(build, list, get, newTemplateDeleteCommand(out), newTemplateDeliveryCommand(out))
	return c
}

var deliveryHeader = []string{"NODE", "STATE", "REASON", "DELIVERED/TOTAL"}

func deliveryRow(d *operatorv1.TemplateNodeDelivery) []string {
	o := d.GetObservation()
	reason := "-"
	if o.GetReason() != ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_UNSPECIFIED {
		reason = trimEnum(o.GetReason().String(), "TEMPLATE_DELIVERY_REASON_")
	}
	return []string{d.GetNodeId(), trimEnum(o.GetState().String(), "TEMPLATE_DELIVERY_STATE_"), reason,
		fmt.Sprintf("%d/%d", o.GetDeliveredBytes(), o.GetTotalBytes())}
}

// newTemplateDeliveryCommand is `kibotos template delivery`: every page of
// GetTemplateDelivery, printed as one answer.
func newTemplateDeliveryCommand(out *outputFlag) *cobra.Command {
	var node string
	c := &cobra.Command{
		Use:   "delivery TEMPLATE[@REVISION]",
		Short: "Show, per node, how far a Template revision's image has arrived",
		Long: `delivery shows, for every admitted node (or the one --node names), whether
it holds the revision's image (READY), is receiving it (NOT_READY,
DISTRIBUTING, with the bytes so far), cannot run it (CAPABILITY_MISMATCH),
or has no live session to say (UNKNOWN, OBSERVATION_STALE). Without
@REVISION it reads the Template's default revision. Nodes fetch an image on
the first start that needs it. ctrl answers from what the nodes last
reported; no node is asked.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := templateClient()
			if err != nil {
				return err
			}
			template, revision, _ := strings.Cut(args[0], "@")
			res, err := templateDelivery(cmd.Context(), client, &operatorv1.GetTemplateDeliveryRequest{
				Selector: &ctrlv1.TemplateSelector{Template: template, Revision: revision}, NodeId: node,
			})
			if err != nil {
				return err
			}
			var rows [][]string
			for _, d := range res.GetDeliveries() {
				rows = append(rows, deliveryRow(d))
			}
			if err := out.print(cmd.OutOrStdout(), res, deliveryHeader, rows); err != nil || out.structured() {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s@%s: %d of %d admitted nodes READY\n", res.GetRef().GetTemplate(), res.GetRef().GetRevision(),
				res.GetReadyNodeCount(), res.GetReadyNodeCount()+res.GetNotReadyNodeCount())
			return err
		},
	}
	c.Flags().StringVar(&node, "node", "", "read this node only")
	return c
}

// templateDelivery reads every page of a delivery into one answer: the
// last page's, with the deliveries of them all.
func templateDelivery(ctx context.Context, client operatorv1connect.TemplateCatalogServiceClient, req *operatorv1.GetTemplateDeliveryRequest) (*operatorv1.GetTemplateDeliveryResponse, error) {
	var last *operatorv1.GetTemplateDeliveryResponse
	deliveries, err := everyPage(func(m *operatorv1.GetTemplateDeliveryResponse) []*operatorv1.TemplateNodeDelivery {
		last = m
		return m.GetDeliveries()
	}, func(token string) (*connect.Response[operatorv1.GetTemplateDeliveryResponse], error) {
		req.PageToken = token
		return client.GetTemplateDelivery(ctx, connect.NewRequest(req))
	})
	if err != nil {
		return nil, err
	}
	last.Deliveries = deliveries
	return last, nil
}

// newTemplateDeleteCommand is `kibotos template delete NAME[@REVISION]`.
func newTemplateDeleteCommand(out *outputFlag) *cobra.Command {
	var commandID string
	var expected uint64
	c := &cobra.Command{
		Use:   "delete TEMPLATE[@REVISION]",
		Short: "Delete a Template revision, or a Template with all its revisions",
		Long: `delete TEMPLATE@REVISION deletes that revision; ctrl refuses the Template's
default revision and one a Workspace that is not deleted uses. delete
TEMPLATE deletes the Template and all its revisions (at the version read
now, or --expected-version); ctrl refuses while a Workspace uses any of
them, and for the deployment's default Template.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := templateClient()
			if err != nil {
				return err
			}
			name, revision, isRevision := strings.Cut(args[0], "@")
			if isRevision {
				res, err := client.DeleteTemplateRevision(cmd.Context(), connect.NewRequest(&operatorv1.DeleteTemplateRevisionRequest{
					Command: newCommandMetadata(commandID), Ref: &ctrlv1.TemplateRef{Template: name, Revision: revision},
				}))
				if err != nil {
					return err
				}
				return out.print(cmd.OutOrStdout(), res.Msg, revisionHeader, [][]string{revisionRow(res.Msg.GetRevision())})
			}
			version := expected
			if version == 0 {
				got, err := client.GetTemplate(cmd.Context(), connect.NewRequest(&operatorv1.GetTemplateRequest{Template: name}))
				if err != nil {
					return err
				}
				version = got.Msg.GetTemplate().GetVersion()
			}
			res, err := client.DeleteTemplate(cmd.Context(), connect.NewRequest(&operatorv1.DeleteTemplateRequest{
				Command: newCommandMetadata(commandID), Template: name, ExpectedVersion: version,
			}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, templateHeader, [][]string{templateRow(res.Msg.GetTemplate())})
		},
	}
	c.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")
	c.Flags().Uint64Var(&expected, "expected-version", 0, "refuse unless the Template's version is still this one (default: the one read now)")
	return c
}
