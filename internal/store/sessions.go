package store

import (
	"database/sql"
	"errors"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// DataPlaneSession is a stored data-plane session: the API record (its
// token field always empty) and what only ctrl sees.
type DataPlaneSession struct {
	Session           *ctrlv1.DataPlaneSession
	TokenHash         string
	PreviousTokenHash string // empty when none works any more
	PreviousExpiresAt time.Time
	Revoked           bool
}

// PutDataPlaneSession writes a session.
func (t *Tx) PutDataPlaneSession(s *DataPlaneSession) error {
	var prevNanos int64
	if s.PreviousTokenHash != "" {
		prevNanos = s.PreviousExpiresAt.UnixNano()
	}
	return t.upsert("data_plane_sessions",
		[]string{"session_id", "workspace_id", "token_hash", "previous_token_hash", "previous_expires_at", "revoked", "body"},
		s.Session.GetSessionId(), s.Session.GetWorkspaceId(), s.TokenHash, s.PreviousTokenHash, prevNanos, boolInt(s.Revoked), marshal(s.Session))
}

// GetDataPlaneSession reads a session by id; not found is ErrNotFound.
func (t *Tx) GetDataPlaneSession(id string, lock bool) (*DataPlaneSession, error) {
	q := "SELECT token_hash, previous_token_hash, previous_expires_at, revoked, body FROM data_plane_sessions WHERE session_id = ?"
	if lock {
		q += t.d.lock
	}
	return scanSession(t.queryRow(q, id))
}

// DataPlaneSessionByToken finds the session a token hash is the current or
// the previous token of; none is ErrNotFound.
func (t *Tx) DataPlaneSessionByToken(hash string) (*DataPlaneSession, error) {
	if hash == "" {
		return nil, ErrNotFound
	}
	return scanSession(t.queryRow("SELECT token_hash, previous_token_hash, previous_expires_at, revoked, body FROM data_plane_sessions WHERE token_hash = ? OR previous_token_hash = ?", hash, hash))
}

func scanSession(row *sql.Row) (*DataPlaneSession, error) {
	s := &DataPlaneSession{Session: &ctrlv1.DataPlaneSession{}}
	var prevNanos, revoked int64
	var body []byte
	if err := row.Scan(&s.TokenHash, &s.PreviousTokenHash, &prevNanos, &revoked, &body); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, err
	}
	if s.PreviousTokenHash != "" {
		s.PreviousExpiresAt = time.Unix(0, prevNanos).UTC()
	}
	s.Revoked = revoked != 0
	return s, unmarshal(body, s.Session)
}
