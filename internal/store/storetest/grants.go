package storetest

import (
	"database/sql"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// testGrantEnrollmentsInOrder: the nodes a grant enrolled read back in the
// order they enrolled, with the grant (GetGrant) and with a page of grants
// (ListGrants), each grant its own; writing a grant read with them neither
// repeats nor loses them; the secret's lookup reads none.
func testGrantEnrollmentsInOrder(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error {
		for _, id := range []string{"grant-a", "grant-b", "grant-c"} {
			if err := tx.PutGrant(activeGrant(id), "hash-"+id); err != nil {
				return err
			}
		}
		for _, e := range [][2]string{{"grant-a", "node-1"}, {"grant-c", "node-9"}, {"grant-a", "node-3"}, {"grant-a", "node-2"}} {
			if err := tx.AddGrantEnrollment(e[0], e[1]); err != nil {
				return err
			}
		}
		return nil
	})
	enrolled := func(id string) []string {
		var g *operatorv1.EnrollmentGrant
		mustTx(t, s, func(tx *store.Tx) error {
			var err error
			g, err = tx.GetGrant(id, false)
			return err
		})
		return g.GetEnrolledNodeIds()
	}
	if got, want := enrolled("grant-a"), []string{"node-1", "node-3", "node-2"}; !slices.Equal(got, want) {
		t.Errorf("grant-a enrolled %v, want %v", got, want)
	}
	mustTx(t, s, func(tx *store.Tx) error {
		list, err := tx.ListGrants("", 10)
		if err != nil {
			return err
		}
		var got [][]string
		for _, g := range list {
			got = append(got, g.GetEnrolledNodeIds())
		}
		if want := [][]string{{"node-1", "node-3", "node-2"}, nil, {"node-9"}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("ListGrants enrolled %v, want %v", got, want)
		}
		if page, err := tx.ListGrants("grant-a", 1); err != nil || len(page) != 1 || len(page[0].GetEnrolledNodeIds()) != 0 {
			t.Errorf("ListGrants after grant-a = %v %v, want grant-b alone with none", page, err)
		}
		g, err := tx.GrantBySecretHash("hash-grant-a", true)
		if err != nil || len(g.GetEnrolledNodeIds()) != 0 {
			t.Errorf("GrantBySecretHash = %v %v, want grant-a without its nodes", g, err)
		}
		full, err := tx.GetGrant("grant-a", true)
		if err != nil {
			return err
		}
		full.LastUsedAt = nil
		if err := tx.PutGrant(full, "hash-grant-a"); err != nil {
			return err
		}
		return tx.AddGrantEnrollment("grant-a", "node-4")
	})
	if got, want := enrolled("grant-a"), []string{"node-1", "node-3", "node-2", "node-4"}; !slices.Equal(got, want) {
		t.Errorf("grant-a enrolled after a rewrite %v, want %v", got, want)
	}
}

// testGrantEnrollmentsBackfilled takes a database back to before migration
// 16, with a grant whose body lists the nodes it enrolled; opening it again
// keeps them, in their order, once, through a rewrite of the grant, and an
// enrollment after comes last.
func testGrantEnrollmentsBackfilled(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error { return tx.PutGrant(activeGrant("grant-a"), "hash-a") })
	s.Close()
	old := activeGrant("grant-a")
	old.EnrolledNodeIds = []string{"node-b", "node-a"}
	body, err := proto.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	db, postgres := openRaw(t, dsn)
	update := "UPDATE enrollment_grants SET body = ? WHERE grant_id = 'grant-a'"
	if postgres {
		update = strings.Replace(update, "?", "$1", 1)
	}
	if _, err := db.Exec(update, body); err != nil {
		t.Fatal(err)
	}
	execRaw(t, db, "DROP TABLE grant_enrollments", "DELETE FROM schema_migrations WHERE version = 16")
	db.Close()
	again := Open(t, dsn)
	mustTx(t, again, func(tx *store.Tx) error {
		// A grant read and written again (as a revocation does) keeps them.
		g, err := tx.GetGrant("grant-a", true)
		if err != nil {
			return err
		}
		if err := tx.PutGrant(g, "hash-a"); err != nil {
			return err
		}
		return tx.AddGrantEnrollment("grant-a", "node-c")
	})
	mustTx(t, again, func(tx *store.Tx) error {
		g, err := tx.GetGrant("grant-a", false)
		if want := []string{"node-b", "node-a", "node-c"}; err != nil || !slices.Equal(g.GetEnrolledNodeIds(), want) {
			t.Errorf("grant-a enrolled after the backfill %v (%v), want %v", g.GetEnrolledNodeIds(), err, want)
		}
		return err
	})
}

func activeGrant(id string) *operatorv1.EnrollmentGrant {
	return &operatorv1.EnrollmentGrant{GrantId: id, State: operatorv1.EnrollmentGrantState_ENROLLMENT_GRANT_STATE_ACTIVE, Reusable: true}
}

// openRaw opens the database under dsn without the store, to take it back
// to before a migration; postgres tells which SQL it speaks.
func openRaw(t *testing.T, dsn string) (db *sql.DB, postgres bool) {
	t.Helper()
	driver, source := "pgx", dsn
	if !strings.HasPrefix(dsn, "postgres") {
		driver, source = "sqlite", strings.TrimPrefix(dsn, "sqlite:")
	}
	db, err := sql.Open(driver, source)
	if err != nil {
		t.Fatal(err)
	}
	return db, driver == "pgx"
}

// execRaw runs stmts on db, ending the test at the first that fails.
func execRaw(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, stmt := range stmts {
		if _, err := db.Exec(stmt); err != nil {
			db.Close()
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}
