package catalog_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
)

func uploadArtifact(t *testing.T, c clients, id string, content []byte) (*operatorv1.PlatformArtifact, error) {
	t.Helper()
	s := c.platforms.UploadPlatformArtifact(context.Background())
	if err := s.Send(&operatorv1.UploadPlatformArtifactRequest{Part: &operatorv1.UploadPlatformArtifactRequest_Header{Header: &operatorv1.PlatformArtifactUploadHeader{
		Command: cmd(id), Digest: digestOf(content), SizeBytes: uint64(len(content)),
	}}}); err != nil {
		t.Fatal(err)
	}
	if len(content) > 0 {
		_ = s.Send(&operatorv1.UploadPlatformArtifactRequest{Part: &operatorv1.UploadPlatformArtifactRequest_Chunk{Chunk: content}})
	}
	res, err := s.CloseAndReceive()
	if err != nil {
		return nil, err
	}
	return res.Msg.GetArtifact(), nil
}

func launchSpec(kernel, initramfs *operatorv1.PlatformArtifact) *operatorv1.LaunchSpec {
	return &operatorv1.LaunchSpec{Vmm: operatorv1.VmmKind_VMM_KIND_QEMU, Kernel: &operatorv1.PlatformArtifact{Digest: kernel.GetDigest()},
		Initramfs: &operatorv1.PlatformArtifact{Digest: initramfs.GetDigest()}, BootTimeout: durationpb.New(0)}
}

func TestPlatformKeysAndLaunches(t *testing.T) {
	ctx := context.Background()
	c := newClients(t)
	kernel, err := uploadArtifact(t, c, "k", []byte("a kernel"))
	if err != nil {
		t.Fatal(err)
	}
	initramfs, err := uploadArtifact(t, c, "i", []byte("an initramfs"))
	if err != nil {
		t.Fatal(err)
	}
	if kernel.GetSizeBytes() != 8 {
		t.Errorf("kernel artifact %v", kernel)
	}
	for _, key := range []string{"main", "other"} {
		if _, err := c.platforms.CreatePlatformKey(ctx, connect.NewRequest(&operatorv1.CreatePlatformKeyRequest{Command: cmd("key-" + key), PlatformKey: key})); err != nil {
			t.Fatal(err)
		}
	}
	// A key without a Launch cannot become the deployment default; the
	// first key is it already.
	if _, err := c.platforms.SetDeploymentDefaultPlatformKey(ctx, connect.NewRequest(&operatorv1.SetDeploymentDefaultPlatformKeyRequest{Command: cmd("dd0"), PlatformKey: "other"})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("deployment default without a Launch: %v", err)
	}
	create := func(id, key string, setDefault bool) (*operatorv1.Launch, error) {
		res, err := c.platforms.CreateLaunch(ctx, connect.NewRequest(&operatorv1.CreateLaunchRequest{Command: cmd(id), PlatformKey: key, Spec: launchSpec(kernel, initramfs), SetDefault: setDefault}))
		if err != nil {
			return nil, err
		}
		return res.Msg.GetLaunch(), nil
	}
	first, err := create("l1", "main", false)
	if err != nil {
		t.Fatal(err)
	}
	second, err := create("l2", "main", false)
	if err != nil {
		t.Fatal(err)
	}
	if !first.GetIsDefault() || second.GetIsDefault() || second.GetRevision() != 2 || first.GetSpec().GetKernel().GetSizeBytes() != 8 || first.GetSpec().GetArchitecture() == "" {
		t.Errorf("launches: %v, %v", first, second)
	}
	if again, err := create("l2", "main", false); err != nil || again.GetLaunchRef() != second.GetLaunchRef() {
		t.Errorf("replay: %v %v", again, err)
	}
	if _, err := create("l2", "other", false); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("same command, other key: %v", err)
	}
	k, err := c.platforms.GetPlatformKey(ctx, connect.NewRequest(&operatorv1.GetPlatformKeyRequest{PlatformKey: "main"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := k.Msg.GetPlatformKey(); got.GetVersion() != 2 || got.GetLaunchCount() != 2 || got.GetDefaultLaunchRef() != first.GetLaunchRef() || !got.GetDeploymentDefault() {
		t.Errorf("key after two launches: %v", got)
	}
	set, err := c.platforms.SetDefaultLaunch(ctx, connect.NewRequest(&operatorv1.SetDefaultLaunchRequest{Command: cmd("sd1"), PlatformKey: "main", LaunchRef: second.GetLaunchRef(), ExpectedVersion: 2}))
	if err != nil || set.Msg.GetPlatformKey().GetVersion() != 3 {
		t.Fatalf("SetDefaultLaunch: %v %v", set, err)
	}
	if _, err := c.platforms.SetDefaultLaunch(ctx, connect.NewRequest(&operatorv1.SetDefaultLaunchRequest{Command: cmd("sd2"), PlatformKey: "main", LaunchRef: first.GetLaunchRef(), ExpectedVersion: 2})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("stale version: %v", err)
	}
	if _, err := c.platforms.SetDefaultLaunch(ctx, connect.NewRequest(&operatorv1.SetDefaultLaunchRequest{Command: cmd("sd3"), PlatformKey: "other", LaunchRef: first.GetLaunchRef()})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a Launch of another key: %v", err)
	}
	list, err := c.platforms.ListLaunches(ctx, connect.NewRequest(&operatorv1.ListLaunchesRequest{PlatformKey: "main", PageSize: 1}))
	if err != nil || len(list.Msg.GetLaunches()) != 1 || list.Msg.GetLaunches()[0].GetRevision() != 2 || !list.Msg.GetLaunches()[0].GetIsDefault() || list.Msg.GetNextPageToken() == "" {
		t.Fatalf("first page: %v %v", list, err)
	}
	next, err := c.platforms.ListLaunches(ctx, connect.NewRequest(&operatorv1.ListLaunchesRequest{PlatformKey: "main", PageSize: 1, PageToken: list.Msg.GetNextPageToken()}))
	if err != nil || len(next.Msg.GetLaunches()) != 1 || next.Msg.GetLaunches()[0].GetRevision() != 1 || next.Msg.GetNextPageToken() != "" {
		t.Errorf("second page: %v %v", next, err)
	}
	if _, err := c.platforms.ListLaunches(ctx, connect.NewRequest(&operatorv1.ListLaunchesRequest{PlatformKey: "other", PageToken: list.Msg.GetNextPageToken()})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a token of another key's list: %v", err)
	}

	// Bad input changes nothing, and names the field.
	missing := &operatorv1.PlatformArtifact{Digest: digestOf([]byte("never uploaded"))}
	for what, tc := range map[string]struct {
		req   *operatorv1.CreateLaunchRequest
		code  connect.Code
		field string
	}{
		"unknown key":      {&operatorv1.CreateLaunchRequest{Command: cmd("b1"), PlatformKey: "nope", Spec: launchSpec(kernel, initramfs)}, connect.CodeNotFound, ""},
		"missing artifact": {&operatorv1.CreateLaunchRequest{Command: cmd("b2"), PlatformKey: "main", Spec: launchSpec(missing, initramfs)}, connect.CodeNotFound, "spec.kernel.digest"},
		"no vmm":           {&operatorv1.CreateLaunchRequest{Command: cmd("b3"), PlatformKey: "main", Spec: &operatorv1.LaunchSpec{}}, connect.CodeInvalidArgument, "spec.vmm"},
		"gvisor kernel":    {&operatorv1.CreateLaunchRequest{Command: cmd("b4"), PlatformKey: "main", Spec: &operatorv1.LaunchSpec{Vmm: operatorv1.VmmKind_VMM_KIND_GVISOR, Kernel: kernel}}, connect.CodeInvalidArgument, "spec.kernel"},
		"root= argument":   {&operatorv1.CreateLaunchRequest{Command: cmd("b5"), PlatformKey: "main", Spec: &operatorv1.LaunchSpec{Vmm: operatorv1.VmmKind_VMM_KIND_QEMU, Kernel: kernel, Initramfs: initramfs, KernelArgs: "quiet root=/dev/vda"}}, connect.CodeInvalidArgument, "spec.kernel_args"},
	} {
		_, err := c.platforms.CreateLaunch(ctx, connect.NewRequest(tc.req))
		if connect.CodeOf(err) != tc.code || (tc.field != "" && apierr.FieldOf(err) != tc.field) {
			t.Errorf("%s: %v (field %q), want %v naming %q", what, err, apierr.FieldOf(err), tc.code, tc.field)
		}
	}
	k, err = c.platforms.GetPlatformKey(ctx, connect.NewRequest(&operatorv1.GetPlatformKeyRequest{PlatformKey: "main"}))
	if err != nil || k.Msg.GetPlatformKey().GetLaunchCount() != 2 {
		t.Errorf("after bad input: %v %v", k, err)
	}
	if _, err := c.platforms.GetLaunch(ctx, connect.NewRequest(&operatorv1.GetLaunchRequest{LaunchRef: "launch-nope"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("unknown launch: %v", err)
	}
	if _, err := c.platforms.CreatePlatformKey(ctx, connect.NewRequest(&operatorv1.CreatePlatformKeyRequest{Command: cmd("key-dup"), PlatformKey: "main"})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("a key name in use: %v", err)
	}
	short := c.platforms.UploadPlatformArtifact(ctx)
	_ = short.Send(&operatorv1.UploadPlatformArtifactRequest{Part: &operatorv1.UploadPlatformArtifactRequest_Header{Header: &operatorv1.PlatformArtifactUploadHeader{
		Command: cmd("k2"), Digest: digestOf([]byte("abc")), SizeBytes: 3,
	}}})
	if _, err := short.CloseAndReceive(); connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != "header.size_bytes" {
		t.Errorf("an upload without its content: %v", err)
	}
}
