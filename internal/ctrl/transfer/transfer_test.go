package transfer_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/transfer"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
)

var ctx = context.Background()

const retention = time.Hour

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type env struct {
	store *store.Store
	svc   *transfer.Service
	clock *clock
	dir   string
}

func newEnv(t *testing.T, b storetest.Backend) *env {
	t.Helper()
	st := storetest.Open(t, b.DSN(t))
	e := &env{store: st, clock: &clock{t: time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)}, dir: filepath.Join(t.TempDir(), "transfers")}
	e.svc = e.open(t)
	return e
}

// open makes a Service on e's store and directory, as a ctrl start does.
func (e *env) open(t *testing.T) *transfer.Service {
	t.Helper()
	svc, err := transfer.New(e.store, transfer.Config{Dir: e.dir, Retention: retention, StallTimeout: time.Minute, Now: e.clock.Now}, transfer.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func sqlite(t *testing.T) *env {
	return newEnv(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
}

func forEachBackend(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, newEnv(t, b)) })
	}
}

func cmd(id string) *ctrlv1.CommandMetadata { return &ctrlv1.CommandMetadata{CommandId: id} }

// makeArchive is a Workspace archive whose writable layer holds used MiB
// of data in a 256 MiB ext4 filesystem.
func makeArchive(t *testing.T, used int64) []byte {
	t.Helper()
	return testenv.WorkspaceArchive(t, used, "complete", "")
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func header(id string, a []byte) *ctrlv1.ImportTransferHeader {
	return &ctrlv1.ImportTransferHeader{Command: cmd(id), SizeBytes: uint64(len(a)), Digest: digestOf(a), Labels: map[string]string{"team": "a"}}
}

// stream is an ImportTransfer stream of h then data in chunks of size.
func stream(h *ctrlv1.ImportTransferHeader, data []byte, size int) transfer.Recv {
	msgs := []*ctrlv1.ImportTransferRequest{{Part: &ctrlv1.ImportTransferRequest_Header{Header: h}}}
	for off := 0; off < len(data); off += size {
		msgs = append(msgs, &ctrlv1.ImportTransferRequest{Part: &ctrlv1.ImportTransferRequest_Data{Data: data[off:min(off+size, len(data))]}})
	}
	return func() (*ctrlv1.ImportTransferRequest, error) {
		if len(msgs) == 0 {
			return nil, io.EOF
		}
		m := msgs[0]
		msgs = msgs[1:]
		return m, nil
	}
}

func (e *env) importOK(t *testing.T, id string, a []byte, l map[string]string) *ctrlv1.Transfer {
	t.Helper()
	h := header(id, a)
	h.Labels = l
	res, err := e.svc.ImportTransfer(ctx, stream(h, a, 64<<10))
	if err != nil {
		t.Fatalf("ImportTransfer %s: %v", id, err)
	}
	return res.GetTransfer()
}

func (e *env) get(t *testing.T, id string) *ctrlv1.Transfer {
	t.Helper()
	res, err := e.svc.GetTransfer(ctx, &ctrlv1.GetTransferRequest{TransferId: id})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetTransfer()
}

func (e *env) download(t *testing.T, id string, offset uint64) ([]byte, error) {
	t.Helper()
	var got []byte
	err := e.svc.DownloadTransfer(ctx, &ctrlv1.DownloadTransferRequest{TransferId: id, Offset: offset}, func(r *ctrlv1.DownloadTransferResponse) error {
		if r.GetOffset() != offset+uint64(len(got)) {
			t.Errorf("chunk at offset %d, want %d", r.GetOffset(), offset+uint64(len(got)))
		}
		got = append(got, r.GetData()...)
		return nil
	})
	return got, err
}

// files lists e's transfer directory.
func (e *env) files(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range entries {
		names = append(names, d.Name())
	}
	return names
}

func wantCode(t *testing.T, err error, code connect.Code, field string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("got %v (%v), want %v", connect.CodeOf(err), err, code)
	}
	if field != "" && apierr.FieldOf(err) != field {
		t.Fatalf("error %v names field %q, want %q", err, apierr.FieldOf(err), field)
	}
}

func TestImportVerifiesKeepsAndDownloadsTheArchive(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		a := makeArchive(t, 3)
		tr := e.importOK(t, "imp-1", a, map[string]string{"team": "a"})
		m := tr.GetManifest()
		switch {
		case tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_IMPORTED:
			t.Fatalf("state %v, want IMPORTED", tr.GetState())
		case m.GetSizeBytes() != uint64(len(a)) || m.GetDigest() != digestOf(a):
			t.Fatalf("manifest size %d digest %s; want %d, %s", m.GetSizeBytes(), m.GetDigest(), len(a), digestOf(a))
		case tr.GetDoneBytes() != uint64(len(a)) || tr.GetTotalBytes() != uint64(len(a)):
			t.Fatalf("done %d / total %d, want both %d", tr.GetDoneBytes(), tr.GetTotalBytes(), len(a))
		case m.GetTemplate().GetTemplate() != "busybox" || m.GetTemplate().GetRevision() != "1":
			t.Fatalf("template %v", m.GetTemplate())
		case m.GetResources().GetMemoryBytes() != 512<<20 || m.GetCompleteness() != ctrlv1.Completeness_COMPLETENESS_COMPLETE:
			t.Fatalf("resources %v completeness %v", m.GetResources(), m.GetCompleteness())
		case m.GetSourceWorkspaceId() != "" || m.GetSourceVolumeId() != "":
			t.Fatalf("an imported Transfer names its source %q/%q, another deployment's", m.GetSourceWorkspaceId(), m.GetSourceVolumeId())
		case !tr.GetExpiresAt().AsTime().Equal(e.clock.Now().Add(retention)):
			t.Fatalf("expires_at %v, want created + %v", tr.GetExpiresAt().AsTime(), retention)
		}
		// Provider-neutral: nothing of where or how the archive is kept.
		j, _ := protojson.Marshal(tr)
		for _, private := range []string{e.dir, ".archive", `"layer"`, "ws-elsewhere", "extents"} {
			if strings.Contains(string(j), private) {
				t.Fatalf("the Transfer shows %q: %s", private, j)
			}
		}
		got, err := e.download(t, tr.GetTransferId(), 0)
		if err != nil || !bytes.Equal(got, a) {
			t.Fatalf("download: %d bytes, %v; want the %d archive bytes", len(got), err, len(a))
		}
		if files := e.files(t); len(files) != 1 || files[0] != tr.GetTransferId()+".archive" {
			t.Fatalf("transfer directory holds %v", files)
		}
	})
}

// An imported Transfer's completeness is its archive's: "partial" is
// PARTIAL, and an archive that does not say is UNKNOWN (transfers.md M5).
func TestAnImportShowsItsArchivesCompleteness(t *testing.T) {
	e := sqlite(t)
	for i, c := range []struct {
		archive string
		want    ctrlv1.Completeness
	}{{"complete", ctrlv1.Completeness_COMPLETENESS_COMPLETE}, {"partial", ctrlv1.Completeness_COMPLETENESS_PARTIAL}, {"", ctrlv1.Completeness_COMPLETENESS_UNKNOWN}} {
		tr := e.importOK(t, fmt.Sprintf("imp-%d", i), testenv.WorkspaceArchive(t, 1, c.archive, ""), nil)
		if got := tr.GetManifest().GetCompleteness(); got != c.want {
			t.Errorf("an archive whose completeness is %q: %v, want %v", c.archive, got, c.want)
		}
	}
}

func TestImportReplayAnswersTheSameTransfer(t *testing.T) {
	e := sqlite(t)
	a := makeArchive(t, 1)
	first := e.importOK(t, "imp-1", a, map[string]string{"team": "a"})
	// The replay does not read past the header: its bytes were taken.
	onlyHeader := stream(header("imp-1", a), nil, 1)
	res, err := e.svc.ImportTransfer(ctx, onlyHeader)
	if err != nil || res.GetTransfer().GetTransferId() != first.GetTransferId() ||
		res.GetTransfer().GetState() != ctrlv1.TransferState_TRANSFER_STATE_IMPORTED {
		t.Fatalf("replay: %v, %v; want %s IMPORTED", res.GetTransfer(), err, first.GetTransferId())
	}
	other := header("imp-1", a)
	other.Labels = map[string]string{"team": "b"}
	_, err = e.svc.ImportTransfer(ctx, stream(other, a, 1<<20))
	wantCode(t, err, connect.CodeAlreadyExists, "command.command_id")
}

func TestImportRefusesBadHeaders(t *testing.T) {
	e := sqlite(t)
	a := makeArchive(t, 1)
	cases := []struct {
		name  string
		recv  transfer.Recv
		field string
	}{
		{"empty stream", func() (*ctrlv1.ImportTransferRequest, error) { return nil, io.EOF }, "header"},
		{"data first", func() (*ctrlv1.ImportTransferRequest, error) {
			return &ctrlv1.ImportTransferRequest{Part: &ctrlv1.ImportTransferRequest_Data{Data: a}}, nil
		}, "header"},
		{"no command", stream(&ctrlv1.ImportTransferHeader{SizeBytes: 1, Digest: digestOf(a)}, a, 1<<20), "header.command.command_id"},
		{"no size", stream(&ctrlv1.ImportTransferHeader{Command: cmd("x"), Digest: digestOf(a)}, a, 1<<20), "header.size_bytes"},
		{"bad digest", stream(&ctrlv1.ImportTransferHeader{Command: cmd("x"), SizeBytes: 1, Digest: "md5:00"}, a, 1<<20), "header.digest"},
		{"bad label", stream(&ctrlv1.ImportTransferHeader{Command: cmd("x"), SizeBytes: 1, Digest: digestOf(a),
			Labels: map[string]string{"-bad": "v"}}, a, 1<<20), "header.labels[-bad]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.svc.ImportTransfer(ctx, c.recv)
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.HasPrefix(apierr.FieldOf(err), strings.SplitN(c.field, "[", 2)[0]) {
				t.Fatalf("got %v (field %q), want invalid_argument naming %s", err, apierr.FieldOf(err), c.field)
			}
		})
	}
	if res, _ := e.svc.ListTransfers(ctx, &ctrlv1.ListTransfersRequest{}); len(res.GetTransfers()) != 0 {
		t.Fatalf("refused headers made Transfers: %v", res.GetTransfers())
	}
}

// An upload that is wrong in any way leaves a FAILED Transfer at
// FAILURE_STAGE_IMPORTING_TRANSFER and nothing of its bytes.
func TestImportFailuresKeepNothing(t *testing.T) {
	a := makeArchive(t, 1)
	flipped := bytes.Clone(a)
	flipped[len(a)/2] ^= 1
	cases := []struct {
		name      string
		recv      func(id string) transfer.Recv
		field     string
		retryable bool
	}{
		{"a corrupted byte", func(id string) transfer.Recv {
			h := header(id, flipped)
			return stream(h, flipped, 64<<10)
		}, "data", false},
		{"digest differs from the header's", func(id string) transfer.Recv {
			h := header(id, a)
			h.Digest = digestOf([]byte("other"))
			return stream(h, a, 64<<10)
		}, "header.digest", false},
		{"declares more bytes than it sends", func(id string) transfer.Recv {
			h := header(id, a)
			h.SizeBytes++
			return stream(h, a, 64<<10)
		}, "header.size_bytes", false},
		{"sends more bytes than it declares", func(id string) transfer.Recv {
			h := header(id, a)
			return stream(h, append(bytes.Clone(a), 0), 64<<10)
		}, "header.size_bytes", false},
		{"cut short", func(id string) transfer.Recv {
			return stream(header(id, a), a[:len(a)-100], 64<<10)
		}, "data", true},
		{"a chunk over the bound", func(id string) transfer.Recv {
			big := append(bytes.Clone(a), make([]byte, transfer.MaxChunkBytes)...)
			h := header(id, big)
			return stream(h, big, transfer.MaxChunkBytes+1)
		}, "data", false},
		{"a second header", func(id string) transfer.Recv {
			h := header(id, a)
			next := stream(h, a, 64<<10)
			n := 0
			return func() (*ctrlv1.ImportTransferRequest, error) {
				if n++; n == 3 {
					return &ctrlv1.ImportTransferRequest{Part: &ctrlv1.ImportTransferRequest_Header{Header: h}}, nil
				}
				return next()
			}
		}, "header", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := sqlite(t)
			_, err := e.svc.ImportTransfer(ctx, c.recv("imp"))
			wantCode(t, err, connect.CodeInvalidArgument, c.field)
			var ce *connect.Error
			errors.As(err, &ce)
			detail := errorDetail(t, ce)
			if detail.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_IMPORTING_TRANSFER || detail.GetRetryable() != c.retryable || detail.GetCommandId() != "imp" {
				t.Fatalf("error detail %v; want stage IMPORTING_TRANSFER, retryable %v, command imp", detail, c.retryable)
			}
			list, _ := e.svc.ListTransfers(ctx, &ctrlv1.ListTransfersRequest{})
			if len(list.GetTransfers()) != 1 {
				t.Fatalf("%d Transfers, want the FAILED one", len(list.GetTransfers()))
			}
			tr := list.GetTransfers()[0]
			f := tr.GetFailure()
			if tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_FAILED || f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_IMPORTING_TRANSFER ||
				f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST || f.GetMessage() == "" || f.GetRetryable() != c.retryable {
				t.Fatalf("Transfer %v; want FAILED at IMPORTING_TRANSFER, INVALID_REQUEST, retryable %v, with a message", tr, c.retryable)
			}
			if files := e.files(t); len(files) != 0 {
				t.Fatalf("a failed upload left %v", files)
			}
			if _, err := e.download(t, tr.GetTransferId(), 0); connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("download of a FAILED Transfer: %v, want failed_precondition", err)
			}
			// The same command answers the same FAILED Transfer.
			res, err := e.svc.ImportTransfer(ctx, c.recv("imp"))
			if err != nil || res.GetTransfer().GetTransferId() != tr.GetTransferId() || res.GetTransfer().GetState() != ctrlv1.TransferState_TRANSFER_STATE_FAILED {
				t.Fatalf("replay of a failed import: %v, %v", res.GetTransfer(), err)
			}
		})
	}
}

func errorDetail(t *testing.T, ce *connect.Error) *ctrlv1.ErrorDetail {
	t.Helper()
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ed, ok := v.(*ctrlv1.ErrorDetail); ok {
				return ed
			}
		}
	}
	t.Fatalf("%v carries no ErrorDetail", ce)
	return nil
}

// gate is an upload the test feeds chunk by chunk. Sending never blocks
// (the channel holds any archive of the tests); taken counts what the
// upload received.
type gate struct {
	ch          chan *ctrlv1.ImportTransferRequest
	sent, taken atomic.Int64
}

func newGate(h *ctrlv1.ImportTransferHeader) *gate {
	g := &gate{ch: make(chan *ctrlv1.ImportTransferRequest, 1024)}
	g.ch <- &ctrlv1.ImportTransferRequest{Part: &ctrlv1.ImportTransferRequest_Header{Header: h}}
	g.sent.Add(1)
	return g
}

func (g *gate) recv() (*ctrlv1.ImportTransferRequest, error) {
	m, ok := <-g.ch
	if !ok {
		return nil, io.EOF
	}
	g.taken.Add(1)
	return m, nil
}

func (g *gate) send(data []byte) {
	for off := 0; off < len(data); off += 256 << 10 {
		g.sent.Add(1)
		g.ch <- &ctrlv1.ImportTransferRequest{Part: &ctrlv1.ImportTransferRequest_Data{Data: data[off:min(off+256<<10, len(data))]}}
	}
}

// drained says the upload took everything sent: it waits for more.
func (g *gate) drained() bool { return g.taken.Load() == g.sent.Load() }

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startImport runs an import fed through a gate; the Transfer is read once
// it is admitted.
func (e *env) startImport(t *testing.T, id string, a []byte) (*gate, func() (*ctrlv1.Transfer, error), string) {
	t.Helper()
	g := newGate(header(id, a))
	type result struct {
		tr  *ctrlv1.Transfer
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := e.svc.ImportTransfer(ctx, g.recv)
		done <- result{res.GetTransfer(), err}
	}()
	var trID string
	waitFor(t, "the import to be admitted", func() bool {
		res, _ := e.svc.ListTransfers(ctx, &ctrlv1.ListTransfersRequest{})
		for _, tr := range res.GetTransfers() {
			trID = tr.GetTransferId()
		}
		return trID != ""
	})
	return g, func() (*ctrlv1.Transfer, error) { r := <-done; return r.tr, r.err }, trID
}

func TestProgressMovesDuringAnImport(t *testing.T) {
	e := sqlite(t)
	a := makeArchive(t, 6)
	g, wait, id := e.startImport(t, "imp", a)
	if tr := e.get(t, id); tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_IMPORTING || tr.GetTotalBytes() != uint64(len(a)) {
		t.Fatalf("admitted as %v, want IMPORTING with total_bytes %d", tr, len(a))
	}
	half := len(a) / 2
	g.send(a[:half])
	waitFor(t, "done_bytes to move", func() bool {
		done := e.get(t, id).GetDoneBytes()
		return done >= 2<<20
	})
	if done := e.get(t, id).GetDoneBytes(); done > uint64(half) {
		t.Fatalf("done_bytes %d before more than %d were sent", done, half)
	}
	// Deleting an upload in progress is refused until it ends.
	_, err := e.svc.DeleteTransfer(ctx, &ctrlv1.DeleteTransferRequest{Command: cmd("del"), TransferId: id})
	wantCode(t, err, connect.CodeFailedPrecondition, "")
	var ce *connect.Error
	errors.As(err, &ce)
	if d := errorDetail(t, ce); d.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_DELETING_TRANSFER || !d.GetRetryable() {
		t.Fatalf("refused delete's detail %v; want stage DELETING_TRANSFER, retryable", d)
	}
	g.send(a[half:])
	close(g.ch)
	tr, err := wait()
	if err != nil || tr.GetDoneBytes() != uint64(len(a)) || tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_IMPORTED {
		t.Fatalf("import ended as %v, %v", tr, err)
	}
}

func TestDownloadResumesFromAnOffset(t *testing.T) {
	e := sqlite(t)
	a := makeArchive(t, 3)
	tr := e.importOK(t, "imp", a, nil)
	for _, off := range []uint64{1, 1 << 20, uint64(len(a)) - 1, uint64(len(a))} {
		got, err := e.download(t, tr.GetTransferId(), off)
		if err != nil || !bytes.Equal(got, a[off:]) {
			t.Fatalf("download from %d: %d bytes, %v; want the %d after it", off, len(got), err, len(a)-int(off))
		}
	}
	_, err := e.download(t, tr.GetTransferId(), uint64(len(a))+1)
	wantCode(t, err, connect.CodeInvalidArgument, "offset")
	_, err = e.download(t, "tr-none", 0)
	wantCode(t, err, connect.CodeNotFound, "")
	_, err = e.download(t, "", 0)
	wantCode(t, err, connect.CodeInvalidArgument, "transfer_id")
}

func TestDeleteSweepsTheArchive(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		tr := e.importOK(t, "imp", makeArchive(t, 1), nil)
		res, err := e.svc.DeleteTransfer(ctx, &ctrlv1.DeleteTransferRequest{Command: cmd("del"), TransferId: tr.GetTransferId()})
		if err != nil || res.GetTransfer().GetState() != ctrlv1.TransferState_TRANSFER_STATE_DELETED {
			t.Fatalf("DeleteTransfer: %v, %v; want DELETED", res.GetTransfer(), err)
		}
		if files := e.files(t); len(files) != 0 {
			t.Fatalf("a deleted Transfer left %v", files)
		}
		if got := e.get(t, tr.GetTransferId()); got.GetState() != ctrlv1.TransferState_TRANSFER_STATE_DELETED {
			t.Fatalf("GetTransfer of a deleted Transfer: %v", got)
		}
		if list, _ := e.svc.ListTransfers(ctx, &ctrlv1.ListTransfersRequest{}); len(list.GetTransfers()) != 0 {
			t.Fatalf("ListTransfers shows a deleted Transfer: %v", list.GetTransfers())
		}
		for _, id := range []string{"del", "del-again"} {
			res, err := e.svc.DeleteTransfer(ctx, &ctrlv1.DeleteTransferRequest{Command: cmd(id), TransferId: tr.GetTransferId()})
			if err != nil || res.GetTransfer().GetState() != ctrlv1.TransferState_TRANSFER_STATE_DELETED {
				t.Fatalf("DeleteTransfer %s of a deleted Transfer: %v, %v", id, res.GetTransfer(), err)
			}
		}
		_, err = e.download(t, tr.GetTransferId(), 0)
		wantCode(t, err, connect.CodeFailedPrecondition, "")
		_, err = e.svc.DeleteTransfer(ctx, &ctrlv1.DeleteTransferRequest{Command: cmd("x"), TransferId: "tr-none"})
		wantCode(t, err, connect.CodeNotFound, "")
		_, err = e.svc.DeleteTransfer(ctx, &ctrlv1.DeleteTransferRequest{TransferId: tr.GetTransferId()})
		wantCode(t, err, connect.CodeInvalidArgument, "command.command_id")
	})
}

// A delete a crash cut short (DELETING, archive still there) is finished
// by the sweep.
func TestSweepFinishesAnInterruptedDelete(t *testing.T) {
	e := sqlite(t)
	tr := e.importOK(t, "imp", makeArchive(t, 1), nil)
	if err := e.store.Tx(ctx, func(tx *store.Tx) error {
		r, err := tx.GetTransfer(tr.GetTransferId(), true)
		if err != nil {
			return err
		}
		r.Transfer.State = ctrlv1.TransferState_TRANSFER_STATE_DELETING
		return tx.PutTransfer(r)
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.open(t).Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.get(t, tr.GetTransferId()); got.GetState() != ctrlv1.TransferState_TRANSFER_STATE_DELETED || len(e.files(t)) != 0 {
		t.Fatalf("after the sweep: %v, files %v", got.GetState(), e.files(t))
	}
}

func TestTransfersExpireAtTheirDeadline(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		tr := e.importOK(t, "imp", makeArchive(t, 1), nil)
		e.clock.Advance(retention - time.Second)
		if err := e.svc.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		if got := e.get(t, tr.GetTransferId()); got.GetState() != ctrlv1.TransferState_TRANSFER_STATE_IMPORTED {
			t.Fatalf("before its deadline the Transfer is %v", got.GetState())
		}
		e.clock.Advance(time.Second)
		if err := e.svc.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		got := e.get(t, tr.GetTransferId())
		if got.GetState() != ctrlv1.TransferState_TRANSFER_STATE_EXPIRED || !got.GetUpdatedAt().AsTime().Equal(e.clock.Now()) {
			t.Fatalf("at its deadline the Transfer is %v (updated %v)", got.GetState(), got.GetUpdatedAt().AsTime())
		}
		if files := e.files(t); len(files) != 0 {
			t.Fatalf("an expired Transfer left %v", files)
		}
		if list, _ := e.svc.ListTransfers(ctx, &ctrlv1.ListTransfersRequest{}); len(list.GetTransfers()) != 0 {
			t.Fatalf("ListTransfers shows an expired Transfer")
		}
		_, err := e.download(t, tr.GetTransferId(), 0)
		wantCode(t, err, connect.CodeFailedPrecondition, "")
	})
}

// An upload this process is receiving is never failed for being slow;
// one left by a previous run (a crash) is, after StallTimeout, and its
// partial file is gone.
func TestStalledUploadsFail(t *testing.T) {
	e := sqlite(t)
	a := makeArchive(t, 1)
	g, wait, active := e.startImport(t, "imp", a)
	g.send(a[:1<<20])
	// Once the upload waits for more it writes nothing until it gets more.
	waitFor(t, "the upload to take what was sent", g.drained)
	e.clock.Advance(2 * time.Minute)
	if err := e.svc.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if st := e.get(t, active).GetState(); st != ctrlv1.TransferState_TRANSFER_STATE_IMPORTING {
		t.Fatalf("an active upload is %v after the sweep", st)
	}
	// A new process (a ctrl restart) knows of no upload: the partial file
	// is removed at start and the Transfer fails once stalled.
	restarted := e.open(t)
	if files := e.files(t); len(files) != 0 {
		t.Fatalf("a restart kept %v", files)
	}
	// Past StallTimeout again, so that a progress write racing the first
	// advance (the upload between its receive and its write) is stale too.
	e.clock.Advance(2 * time.Minute)
	if err := restarted.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	tr := e.get(t, active)
	if tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_FAILED || tr.GetFailure().GetReason() != ctrlv1.FailureReason_FAILURE_REASON_TIMED_OUT ||
		!tr.GetFailure().GetRetryable() {
		t.Fatalf("a stalled upload is %v", tr)
	}
	// The first process's upload then stops at its next progress.
	g.send(a[1<<20:])
	close(g.ch)
	if _, err := wait(); connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("the given-up upload answered %v, want aborted", err)
	}
	if got := e.get(t, active); got.GetState() != ctrlv1.TransferState_TRANSFER_STATE_FAILED {
		t.Fatalf("the given-up upload ended %v", got.GetState())
	}
}

// An upload a ctrl restart cut short fails at the next sweep, well before
// StallTimeout: its partial file went with the restart, so nothing can
// finish it; retryable, nothing kept.
func TestAnUploadCutByARestartFailsAtOnce(t *testing.T) {
	e := sqlite(t)
	a := makeArchive(t, 1)
	g, _, active := e.startImport(t, "imp", a)
	g.send(a[:1<<20])
	waitFor(t, "the upload to take what was sent", g.drained)
	restarted := e.open(t)
	if err := restarted.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if st := e.get(t, active).GetState(); st != ctrlv1.TransferState_TRANSFER_STATE_IMPORTING {
		t.Fatalf("an upload is %v right after a restart, within the grace of a new admission", st)
	}
	e.clock.Advance(11 * time.Second) // past orphanGrace, within StallTimeout
	if err := restarted.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	tr := e.get(t, active)
	if tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_FAILED || tr.GetFailure().GetReason() != ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE ||
		!tr.GetFailure().GetRetryable() || tr.GetFailure().GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_IMPORTING_TRANSFER {
		t.Fatalf("an upload a restart cut short is %v", tr)
	}
	if files := e.files(t); len(files) != 0 {
		t.Fatalf("kept %v", files)
	}
	g.send(a[1<<20:])
	close(g.ch)
}

func TestListPagesBySelector(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		a := makeArchive(t, 1)
		var a1 []string
		for i, team := range []string{"a", "b", "a", "a"} {
			tr := e.importOK(t, "imp-"+string(rune('0'+i)), a, map[string]string{"team": team})
			if team == "a" {
				a1 = append(a1, tr.GetTransferId())
			}
		}
		var got []string
		token := ""
		for {
			res, err := e.svc.ListTransfers(ctx, &ctrlv1.ListTransfersRequest{LabelSelector: "team=a", PageSize: 1, PageToken: token})
			if err != nil {
				t.Fatal(err)
			}
			for _, tr := range res.GetTransfers() {
				got = append(got, tr.GetTransferId())
			}
			if token = res.GetNextPageToken(); token == "" {
				break
			}
			_, err = e.svc.ListTransfers(ctx, &ctrlv1.ListTransfersRequest{LabelSelector: "team=b", PageToken: token})
			wantCode(t, err, connect.CodeInvalidArgument, "page_token")
		}
		sortStrings(a1)
		if strings.Join(got, ",") != strings.Join(a1, ",") {
			t.Fatalf("pages of team=a: %v, want %v", got, a1)
		}
		_, err := e.svc.ListTransfers(ctx, &ctrlv1.ListTransfersRequest{LabelSelector: "team in (a"})
		wantCode(t, err, connect.CodeInvalidArgument, "label_selector")
	})
}

func sortStrings(s []string) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

// A client that goes away mid-upload leaves a FAILED (CANCELLED,
// retryable) Transfer and nothing of its bytes.
func TestCancelledUploadFails(t *testing.T) {
	e := sqlite(t)
	a := makeArchive(t, 1)
	cctx, cancel := context.WithCancel(ctx)
	next := stream(header("imp", a), a[:len(a)/2], 64<<10)
	recv := func() (*ctrlv1.ImportTransferRequest, error) {
		m, err := next()
		if errors.Is(err, io.EOF) {
			cancel()
			return nil, connect.NewError(connect.CodeCanceled, cctx.Err())
		}
		return m, err
	}
	_, err := e.svc.ImportTransfer(cctx, recv)
	wantCode(t, err, connect.CodeCanceled, "")
	list, _ := e.svc.ListTransfers(ctx, &ctrlv1.ListTransfersRequest{})
	if len(list.GetTransfers()) != 1 {
		t.Fatalf("%d Transfers, want the FAILED one", len(list.GetTransfers()))
	}
	f := list.GetTransfers()[0].GetFailure()
	if f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_CANCELLED || !f.GetRetryable() || f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_IMPORTING_TRANSFER {
		t.Fatalf("failure %v; want CANCELLED, retryable, at IMPORTING_TRANSFER", f)
	}
	if files := e.files(t); len(files) != 0 {
		t.Fatalf("a cancelled upload left %v", files)
	}
}
