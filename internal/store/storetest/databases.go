// Package storetest is the one conformance suite every store backend passes,
// and the helpers that give a test a fresh database of each kind.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"google.golang.org/protobuf/types/known/timestamppb"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/store"
)

// EnvPostgres names a PostgreSQL server for tests: a DSN whose user may
// create databases. scripts/test.sh starts a throwaway server and sets it.
const EnvPostgres = "KIBOTOS_TEST_POSTGRES_DSN"

// EnvRequirePostgres makes a missing PostgreSQL a test failure instead of a
// skip; scripts/test.sh (and so CI) sets it.
const EnvRequirePostgres = "KIBOTOS_TEST_REQUIRE_POSTGRES"

// Backend is one kind of database a test runs against.
type Backend struct {
	Name string
	// DSN returns a fresh, empty database for one test.
	DSN func(t testing.TB) string
}

// Backends are SQLite and PostgreSQL.
func Backends() []Backend {
	return []Backend{{"sqlite", SQLiteDSN}, {"postgres", PostgresDSN}}
}

// SQLiteDSN is a new database file in the test's temporary directory.
func SQLiteDSN(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "kibotos.db")
}

// PostgresDSN creates a new database on the server $KIBOTOS_TEST_POSTGRES_DSN
// names, dropped when the test ends.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	admin := os.Getenv(EnvPostgres)
	if admin == "" {
		if os.Getenv(EnvRequirePostgres) != "" {
			t.Fatalf("%s is required and not set", EnvPostgres)
		}
		t.Skipf("no PostgreSQL: set %s (scripts/test.sh starts one)", EnvPostgres)
	}
	db, err := sql.Open("pgx", admin)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "kibotos_test_" + hex.EncodeToString(b)
	// The locale a production database typically has, not the server's
	// C default: its collation orders text otherwise than bytes do, which
	// the store must not let through to any list's order.
	if _, err := db.Exec("CREATE DATABASE " + name + " TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("pgx", admin)
		if err != nil {
			return
		}
		defer db.Close()
		_, _ = db.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// Open opens dsn and closes it when the test ends.
func Open(t testing.TB, dsn string) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// PutNodeWithPool records node nodeID, admitted but never connected,
// declaring pool as its default, and gives pool a capacity room for every
// test's objects: admission resolves pools, though no node can act.
func PutNodeWithPool(t testing.TB, s *store.Store, nodeID, pool string) {
	t.Helper()
	if err := s.Tx(context.Background(), func(tx *store.Tx) error {
		if err := tx.PutNode(&operatorv1.NodeRegistration{
			NodeId: nodeID, Admission: operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED,
			StoragePools: []*operatorv1.StoragePoolAttachment{{NodeId: nodeID, StoragePool: pool, DefaultPool: true, Available: true}},
		}); err != nil {
			return err
		}
		return tx.SetStoragePoolCapacity(pool, 1<<40)
	}); err != nil {
		t.Fatal(err)
	}
}

// PutLiveNode records node nodeID admitted and READY, its session live and
// seen now, running VMs (QEMU) and block files, declaring pool as its
// default: a node a placement takes, room aside (it reports no host
// resources, so only a request of nothing fits).
func PutLiveNode(t testing.TB, s *store.Store, nodeID, pool string) {
	t.Helper()
	now := timestamppb.Now()
	if err := s.Tx(context.Background(), func(tx *store.Tx) error {
		return tx.PutNode(&operatorv1.NodeRegistration{
			NodeId: nodeID, Incarnation: 1, Admission: operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED,
			Status:       operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY,
			Session:      &operatorv1.NodeSessionSummary{Live: true, ConnectedAt: now, LastSeenAt: now},
			Observation:  &operatorv1.NodeObservationSummary{Capabilities: []string{capability.QEMU, capability.BlockFile}},
			StoragePools: []*operatorv1.StoragePoolAttachment{{NodeId: nodeID, StoragePool: pool, DefaultPool: true, Available: true}},
		})
	}); err != nil {
		t.Fatal(err)
	}
}

// PutReadyTemplate records Template template with one READY revision rev,
// its default, and makes it the deployment default when deploymentDefault
// is set: what a create resolves its TemplateSelector against.
func PutReadyTemplate(t testing.TB, s *store.Store, template, rev string, deploymentDefault bool) {
	t.Helper()
	if err := s.Tx(context.Background(), func(tx *store.Tx) error {
		if err := tx.PutTemplate(&operatorv1.Template{Template: template, DefaultRevision: rev}); err != nil {
			return err
		}
		if err := tx.InsertTemplateRevision(revision(template, rev, operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_READY)); err != nil {
			return err
		}
		if deploymentDefault {
			return tx.SetDeploymentDefaultTemplate(template)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
