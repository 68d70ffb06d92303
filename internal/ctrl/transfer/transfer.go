// Package transfer is the Transfer domain: archives that ExportWorkspace and
// ExportVolume make and RestoreWorkspace starts from, and archives uploaded
// with ImportTransfer. It keeps the archives in ctrl's artifact store (a
// directory of ctrl's state), verifies every upload with the archive reader
// of internal/transfer/archive while it arrives, streams them back with
// DownloadTransfer (resumable from an offset), deletes them, and expires
// them at their deadline.
//
// Exports have a node that reaches a block file's pool send it
// (export.go); restore is not built yet (docs/TRANSFER-FORMAT.md).
//
// A Transfer's archive is <dir>/<transfer_id>.archive once verified, and
// <dir>/<transfer_id>.partial while it arrives: only this process writes
// the directory, so partial files left at start belong to no upload.
package transfer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/catalog"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/labels"
	"github.com/kibotos/kibotos/internal/ctrl/page"
	"github.com/kibotos/kibotos/internal/store"
)

// Defaults of Config.
const (
	// DefaultRetention is how long a Transfer is kept before it expires.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultMaxArchiveBytes bounds ImportTransferHeader.size_bytes.
	DefaultMaxArchiveBytes uint64 = 1 << 40
	// DefaultStallTimeout is how long an upload may send nothing before the
	// sweep fails it (its client or this ctrl went away).
	DefaultStallTimeout = 5 * time.Minute
)

// MaxChunkBytes bounds one ImportTransferRequest.data and is the size of
// the DownloadTransferResponse chunks.
const MaxChunkBytes = 4 << 20

// downloadChunk is how much one DownloadTransferResponse carries.
const downloadChunk = 1 << 20

const (
	kindImportTransfer = "ImportTransfer"
	kindDeleteTransfer = "DeleteTransfer"
)

// Config is where Transfers live and how long.
type Config struct {
	// Dir holds the archives (ctrl puts it under its artifact store).
	Dir string
	// Retention is how long after its creation a Transfer expires; zero is
	// DefaultRetention, negative is never.
	Retention time.Duration
	// MaxArchiveBytes bounds an upload; zero is DefaultMaxArchiveBytes.
	MaxArchiveBytes uint64
	// StallTimeout: zero is DefaultStallTimeout.
	StallTimeout time.Duration
	// Now is the clock; nil is time.Now. Tests inject one.
	Now func() time.Time
}

// Deps are what exports need beside the store: the command runner that
// drives them and the fleet that reaches the nodes holding block files.
type Deps struct {
	Runner *command.Runner
	Fleet  *fleet.Fleet
	// Catalog keeps the template images an export carries and a restore
	// registers.
	Catalog *catalog.Catalog
}

// Service is TransferService, and the exports of WorkspaceService and
// VolumeService.
type Service struct {
	store *store.Store
	cfg   Config
	deps  Deps

	mu sync.Mutex
	// active are the uploads this process is receiving, by transfer_id:
	// the sweep leaves them alone however long they take.
	active map[string]bool
}

// New makes the Transfer domain on s, creating cfg.Dir and removing the
// partial uploads a previous run left. With deps.Runner it drives exports.
func New(s *store.Store, cfg Config, deps Deps) (*Service, error) {
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.MaxArchiveBytes == 0 {
		cfg.MaxArchiveBytes = DefaultMaxArchiveBytes
	}
	if cfg.StallTimeout == 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("transfer directory: %w", err)
	}
	partials, err := filepath.Glob(filepath.Join(cfg.Dir, "*"+partialSuffix))
	if err != nil {
		return nil, err
	}
	for _, p := range partials {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove a partial upload: %w", err)
		}
	}
	svc := &Service{store: s, cfg: cfg, deps: deps, active: map[string]bool{}}
	if deps.Runner != nil {
		deps.Runner.Handle(KindExportWorkspace, svc.runExport)
		deps.Runner.Handle(KindExportVolume, svc.runExport)
	}
	return svc, nil
}

const (
	archiveSuffix = ".archive"
	partialSuffix = ".partial"
)

func (s *Service) archivePath(id string) string { return filepath.Join(s.cfg.Dir, id+archiveSuffix) }
func (s *Service) partialPath(id string) string { return filepath.Join(s.cfg.Dir, id+partialSuffix) }

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "tr-" + hex.EncodeToString(b)
}

// stateName is a TransferState as messages say it: "IMPORTED".
func stateName(st ctrlv1.TransferState) string {
	return strings.TrimPrefix(st.String(), "TRANSFER_STATE_")
}

func getTransfer(tx *store.Tx, id string, lock bool) (*store.TransferRecord, error) {
	if id == "" {
		return nil, apierr.Invalid("transfer_id", "is required")
	}
	r, err := tx.GetTransfer(id, lock)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierr.NotFound("transfer", id)
	}
	return r, err
}

// read is the Transfer id as stored now.
func (s *Service) read(ctx context.Context, id string) (*ctrlv1.Transfer, error) {
	var tr *ctrlv1.Transfer
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		r, err := getTransfer(tx, id, false)
		if err == nil {
			tr = r.Transfer
		}
		return err
	})
	return tr, err
}

// update changes the stored Transfer id with fn in one transaction; fn may
// refuse with an error, and its record is written only when it returns nil.
func (s *Service) update(ctx context.Context, id string, fn func(r *store.TransferRecord, now time.Time) error) (*ctrlv1.Transfer, error) {
	var tr *ctrlv1.Transfer
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		r, err := getTransfer(tx, id, true)
		if err != nil {
			return err
		}
		if err := fn(r, s.cfg.Now()); err != nil {
			return err
		}
		tr = r.Transfer
		return tx.PutTransfer(r)
	})
	return tr, err
}

// admit admits a command whose first effect is written by effect; fresh
// says whether this call admitted it (false: a replay).
func admit[R proto.Message](ctx context.Context, s *Service, field string, cmd *ctrlv1.CommandMetadata, kind string, req proto.Message,
	effect func(tx *store.Tx, now time.Time) (string, R, error), long bool) (res R, fresh bool, err error) {
	if err := command.ValidateID(field, cmd); err != nil {
		return res, false, err
	}
	now := s.cfg.Now()
	err = command.Do(ctx, s.store, func(tx *store.Tx) error {
		fresh = false
		out, err := command.Admit(tx, now, cmd.GetCommandId(), kind, req, func() (command.Effect, error) {
			fresh = true
			target, r, err := effect(tx, now)
			return command.Effect{Target: target, Result: r, Long: long}, err
		})
		if err == nil {
			res = out.(R)
		}
		return err
	})
	return res, fresh, err
}

// GetTransfer reads one Transfer, DELETED and EXPIRED ones included.
func (s *Service) GetTransfer(ctx context.Context, req *ctrlv1.GetTransferRequest) (*ctrlv1.GetTransferResponse, error) {
	tr, err := s.read(ctx, req.GetTransferId())
	if err != nil {
		return nil, err
	}
	return &ctrlv1.GetTransferResponse{Transfer: tr}, nil
}

// ListTransfers pages the Transfers not DELETED or EXPIRED by transfer_id,
// narrowed by a label selector; page tokens are bound to the selector.
func (s *Service) ListTransfers(ctx context.Context, req *ctrlv1.ListTransfersRequest) (*ctrlv1.ListTransfersResponse, error) {
	sel, err := labels.Parse(req.GetLabelSelector())
	if err != nil {
		return nil, err
	}
	filter := sel.String()
	after, err := page.After(req.GetPageToken(), filter)
	if err != nil {
		return nil, err
	}
	res := &ctrlv1.ListTransfersResponse{}
	err = s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		res.Transfers, res.NextPageToken, err = page.Collect(page.Size(req.GetPageSize()), after, filter,
			(*ctrlv1.Transfer).GetTransferId,
			func(t *ctrlv1.Transfer) bool { return sel.Matches(t.GetLabels()) },
			func(after string, n int) ([]*ctrlv1.Transfer, error) { return tx.ListTransfers(after, n) })
		return err
	})
	return res, err
}
