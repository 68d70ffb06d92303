package node_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/node"
)

func copyOp(from, objectID, to string) *nodev1.CopyBlockFile {
	return &nodev1.CopyBlockFile{Source: ensureOp(from, objectID, 0).GetRef(), TargetStoragePool: to}
}

func TestCopyBlockFile(t *testing.T) {
	needE2fsprogs(t)
	h := newHarness(t)
	cfg := h.config()
	fastDir := t.TempDir()
	cfg.Pools = append(cfg.Pools, node.Pool{Name: "fast", Dir: fastDir})
	h.start(cfg)
	s := recv(t, h.ctrl.sessions, "session")

	if res := s.command(t, "make", ensureOp("local", "vol-1", 64*MiB)); res.GetCode() != 0 {
		t.Fatalf("EnsureBlockFile: %v", res)
	}
	src := filepath.Join(h.poolDir, "volumes", "vol-1.img")
	f, err := os.OpenFile(src, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte("kibotos"), MiB), 20*MiB); err != nil {
		t.Fatal(err)
	}
	f.Close()

	res := s.command(t, "copy", copyOp("local", "vol-1", "fast"))
	if res.GetCode() != 0 {
		t.Fatalf("CopyBlockFile: %v", res)
	}
	var copied nodev1.BlockFileCopied
	if err := res.GetResult().UnmarshalTo(&copied); err != nil {
		t.Fatal(err)
	}
	if !copied.GetTarget().GetExists() || copied.GetTarget().GetCapacityBytes() != 64*MiB ||
		copied.GetCopiedBytes() < 7*MiB || copied.GetCopiedBytes() >= 64*MiB || copied.GetDigest() == "" {
		t.Fatalf("copy result %v", &copied)
	}
	want, _ := os.ReadFile(src)
	got, err := os.ReadFile(filepath.Join(fastDir, "volumes", "vol-1.img"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the copy differs from the source (%v)", err)
	}
	if _, err := os.Stat(src); err != nil {
		t.Fatalf("the copy removed its source: %v", err)
	}
	// The copy reported its progress, ending at all bytes in use.
	var last *nodev1.CopyProgress
	for _, m := range s.seen {
		if p := m.GetCopyProgress(); p != nil && p.GetOperationId() == "copy" {
			last = p
		}
	}
	if last == nil || last.GetCopiedBytes() != copied.GetCopiedBytes() || last.GetTotalBytes() != copied.GetCopiedBytes() {
		t.Fatalf("last progress %v, want %d of %d bytes", last, copied.GetCopiedBytes(), copied.GetCopiedBytes())
	}

	// A resend of the same operation is answered from the record.
	if again := s.command(t, "copy", copyOp("local", "vol-1", "fast")); !proto.Equal(again, res) {
		t.Fatalf("resend answered %v, want %v", again, res)
	}
	// A new operation finds the copy done and answers the same.
	again := s.command(t, "copy-again", copyOp("local", "vol-1", "fast"))
	var second nodev1.BlockFileCopied
	if again.GetCode() != 0 || again.GetResult().UnmarshalTo(&second) != nil || second.GetDigest() != copied.GetDigest() {
		t.Fatalf("second copy %v, first %v", again, &copied)
	}
}

func TestCopyBlockFileRefusals(t *testing.T) {
	needE2fsprogs(t)
	h := newHarness(t)
	cfg := h.config()
	fastDir := t.TempDir()
	cfg.Pools = append(cfg.Pools, node.Pool{Name: "fast", Dir: fastDir},
		node.Pool{Name: "late", Dir: filepath.Join(fastDir, "unmounted")})
	h.start(cfg)
	s := recv(t, h.ctrl.sessions, "session")
	if res := s.command(t, "make", ensureOp("local", "vol-1", 16*MiB)); res.GetCode() != 0 {
		t.Fatalf("EnsureBlockFile: %v", res)
	}
	for _, tc := range []struct {
		opID string
		body *nodev1.CopyBlockFile
		code connect.Code
	}{
		{"missing", copyOp("local", "vol-2", "fast"), connect.CodeNotFound},
		{"no-target-pool", copyOp("local", "vol-1", "elsewhere"), connect.CodeNotFound},
		{"no-source-pool", copyOp("elsewhere", "vol-1", "fast"), connect.CodeNotFound},
		{"same-pool", copyOp("local", "vol-1", "local"), connect.CodeInvalidArgument},
		{"unmounted", copyOp("local", "vol-1", "late"), connect.CodeUnavailable},
		{"no-source", &nodev1.CopyBlockFile{TargetStoragePool: "fast"}, connect.CodeInvalidArgument},
	} {
		res := s.command(t, tc.opID, tc.body)
		if connect.Code(res.GetCode()) != tc.code || res.GetMessage() == "" {
			t.Errorf("%s: %v %q, want %v", tc.opID, connect.Code(res.GetCode()), res.GetMessage(), tc.code)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(fastDir, "volumes")); len(entries) != 0 {
		t.Fatalf("refused copies left %v in the target pool", entries)
	}
}
