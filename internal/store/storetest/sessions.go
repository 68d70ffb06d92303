package storetest

import (
	"errors"
	"testing"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// RunDataPlaneSessions runs the store tests of data-plane sessions against
// databases from b.
func RunDataPlaneSessions(t *testing.T, b Backend) {
	t.Run("DataPlaneSessionsByToken", func(t *testing.T) {
		t.Parallel()
		testDataPlaneSessionsByToken(t, b.DSN(t))
	})
}

func testDataPlaneSessionsByToken(t *testing.T, dsn string) {
	s := Open(t, dsn)
	prevExpiry := time.Unix(1_800_000_000, 123).UTC()
	sess := &store.DataPlaneSession{
		Session:   &ctrlv1.DataPlaneSession{SessionId: "dps-1", WorkspaceId: "ws-1", Generation: 2, Scopes: []ctrlv1.DataPlaneScope{ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_FILE}},
		TokenHash: "hash-a",
	}
	mustTx(t, s, func(tx *store.Tx) error { return tx.PutDataPlaneSession(sess) })
	// Rotated: the new token is current, the old one previous.
	sess.PreviousTokenHash, sess.PreviousExpiresAt, sess.TokenHash = "hash-a", prevExpiry, "hash-b"
	mustTx(t, s, func(tx *store.Tx) error { return tx.PutDataPlaneSession(sess) })
	mustTx(t, s, func(tx *store.Tx) error {
		for _, h := range []string{"hash-a", "hash-b"} {
			got, err := tx.DataPlaneSessionByToken(h)
			if err != nil {
				t.Fatalf("%s: %v", h, err)
			}
			if got.Session.GetSessionId() != "dps-1" || got.TokenHash != "hash-b" || got.PreviousTokenHash != "hash-a" ||
				!got.PreviousExpiresAt.Equal(prevExpiry) || got.Revoked || got.Session.GetGeneration() != 2 {
				t.Errorf("%s: %+v", h, got)
			}
		}
		for _, h := range []string{"hash-c", ""} {
			if _, err := tx.DataPlaneSessionByToken(h); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("unknown token %q: %v", h, err)
			}
		}
		if _, err := tx.GetDataPlaneSession("dps-2", false); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown session: %v", err)
		}
		return nil
	})
	sess.Revoked, sess.PreviousTokenHash = true, ""
	mustTx(t, s, func(tx *store.Tx) error { return tx.PutDataPlaneSession(sess) })
	mustTx(t, s, func(tx *store.Tx) error {
		got, err := tx.GetDataPlaneSession("dps-1", true)
		if err != nil || !got.Revoked || got.PreviousTokenHash != "" || !got.PreviousExpiresAt.IsZero() {
			t.Errorf("revoked: %+v, %v", got, err)
		}
		if _, err := tx.DataPlaneSessionByToken("hash-a"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a previous token no longer kept still finds the session: %v", err)
		}
		return nil
	})
}
