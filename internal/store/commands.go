package store

import (
	"database/sql"
	"errors"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
)

// CommandRow is a command with the bookkeeping workers use to share it.
type CommandRow struct {
	*storev1.Command
	// InputHash identifies the admitted input: a replay with another hash is
	// a conflict.
	InputHash []byte
	// NextAttemptAt is when a worker may next pick the command up.
	NextAttemptAt time.Time
	// LeaseOwner and LeaseUntil say which worker holds the command; another
	// takes it only after the lease ran out.
	LeaseOwner string
	LeaseUntil time.Time
	Attempts   int64
}

// clone is a copy of c that shares nothing a caller may change: the rows
// a transaction keeps or prefetched are handed out as clones.
func (c *CommandRow) clone() *CommandRow {
	cp := *c
	cp.Command = proto.Clone(c.Command).(*storev1.Command)
	return &cp
}

// Final reports whether the command reached SUCCEEDED or FAILED.
func (c *CommandRow) Final() bool {
	s := c.GetState()
	return s == storev1.CommandState_COMMAND_STATE_SUCCEEDED || s == storev1.CommandState_COMMAND_STATE_FAILED
}

const commandCols = "command_id, kind, target_id, input_hash, state, body, admitted_at, updated_at, next_attempt_at, lease_owner, lease_until, attempts"

func (c *CommandRow) values() []any {
	return []any{
		c.GetCommandId(), c.GetKind(), c.GetTargetId(), c.InputHash, c.GetState().String(), marshal(c.Command),
		c.GetAdmittedAt().AsTime().UnixNano(), c.GetUpdatedAt().AsTime().UnixNano(), c.NextAttemptAt.UnixNano(),
		c.LeaseOwner, c.LeaseUntil.UnixNano(), c.Attempts,
	}
}

func scanCommand(row interface{ Scan(...any) error }) (*CommandRow, error) {
	var (
		c                                     CommandRow
		id, kind, target, state, owner        string
		body                                  []byte
		admitted, updated, next, leaseUntilNs int64
	)
	if err := row.Scan(&id, &kind, &target, &c.InputHash, &state, &body, &admitted, &updated, &next, &owner, &leaseUntilNs, &c.Attempts); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, err
	}
	c.Command = &storev1.Command{}
	if err := proto.Unmarshal(body, c.Command); err != nil {
		return nil, err
	}
	c.NextAttemptAt = time.Unix(0, next)
	c.LeaseOwner = owner
	c.LeaseUntil = time.Unix(0, leaseUntilNs)
	return &c, nil
}

// InsertCommand admits c unless its command_id exists; inserted is false
// when it did. In a transaction that coalesces its writes (Coalesce) the
// command is kept and inserted at its end, and inserted is true: an
// existing command_id fails the transaction there (keepInsert), and the
// admissions of a batch then run alone, where a replay is found.
func (t *Tx) InsertCommand(c *CommandRow) (inserted bool, err error) {
	if kept, err := t.keepInsert("commands", commandColumns, c.values()...); kept || err != nil {
		if err == nil {
			t.co.commands[c.GetCommandId()] = c.clone()
		}
		return err == nil, err
	}
	res, err := t.exec("INSERT INTO commands ("+commandCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (command_id) DO NOTHING", c.values()...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// GetCommand reads one command.
func (t *Tx) GetCommand(id string, lock bool) (*CommandRow, error) {
	if c, ok := t.keptCommand(id); ok {
		return c, nil
	}
	if c, ok := t.prefetchedCommand(id); ok {
		return c, nil
	}
	q := "SELECT " + commandCols + " FROM commands WHERE command_id = ?"
	if lock {
		q += t.d.lock
	}
	return scanCommand(t.pointRow(q, id))
}

// commandColumns are commandCols one by one, and commandUpdated those
// UpdateCommand sets.
var (
	commandColumns = strings.Split(strings.ReplaceAll(commandCols, " ", ""), ",")
	commandUpdated = []string{"state", "body", "updated_at", "next_attempt_at", "lease_owner", "lease_until", "attempts"}
)

// UpdateCommand writes the columns of c that change after its admission.
// Its kind, target, input hash and admission time are fixed then, and not
// set again: SQLite would rewrite commands_target's entry at every update
// (putRow says why).
func (t *Tx) UpdateCommand(c *CommandRow) error {
	t.wrote(c.GetTargetId())
	if t.keep("commands", commandColumns, commandUpdated, c.values()...) {
		t.co.commands[c.GetCommandId()] = c.clone()
		return nil
	}
	_, err := t.exec(`UPDATE commands SET state = ?, body = ?, updated_at = ?, next_attempt_at = ?, lease_owner = ?, lease_until = ?,
		attempts = ? WHERE command_id = ?`,
		c.GetState().String(), marshal(c.Command), c.GetUpdatedAt().AsTime().UnixNano(), c.NextAttemptAt.UnixNano(),
		c.LeaseOwner, c.LeaseUntil.UnixNano(), c.Attempts, c.GetCommandId())
	return err
}

// DeleteCommand removes a command that had no effect (a process start the
// guest refused), so that its command_id is free again.
func (t *Tx) DeleteCommand(id string) error {
	_, err := t.exec("DELETE FROM commands WHERE command_id = ?", id)
	return err
}

var unfinished = "state IN ('COMMAND_STATE_ADMITTED', 'COMMAND_STATE_RUNNING', 'COMMAND_STATE_WAITING')"

// ActiveCommandOn returns the oldest unfinished command on target, or
// ErrNotFound.
func (t *Tx) ActiveCommandOn(target string) (*CommandRow, error) {
	return scanCommand(t.queryRow("SELECT "+commandCols+" FROM commands WHERE target_id = ? AND "+unfinished+
		" ORDER BY admitted_at LIMIT 1", target))
}

// ClaimCommand leases the oldest unfinished command that is due and not
// leased, to owner until leaseUntil. It returns ErrNotFound when there is
// none. On PostgreSQL, SKIP LOCKED lets replicas claim different commands at
// once; the lease keeps a command with one worker after the transaction.
func (t *Tx) ClaimCommand(owner string, now, leaseUntil time.Time) (*CommandRow, error) {
	c, err := scanCommand(t.queryRow("SELECT "+commandCols+" FROM commands WHERE "+unfinished+
		" AND next_attempt_at <= ? AND lease_until <= ? ORDER BY next_attempt_at, admitted_at LIMIT 1"+t.d.skipLocked,
		now.UnixNano(), now.UnixNano()))
	if err != nil {
		return nil, err
	}
	c.LeaseOwner = owner
	c.LeaseUntil = leaseUntil
	c.Attempts++
	if _, err := t.exec("UPDATE commands SET lease_owner = ?, lease_until = ?, attempts = ? WHERE command_id = ?",
		owner, leaseUntil.UnixNano(), c.Attempts, c.GetCommandId()); err != nil {
		return nil, err
	}
	return c, nil
}

// NextDue returns when the earliest unfinished command becomes due, or false.
func (t *Tx) NextDue() (time.Time, bool, error) {
	var ns sql.NullInt64
	if err := t.queryRow("SELECT MIN(CASE WHEN lease_until > next_attempt_at THEN lease_until ELSE next_attempt_at END) FROM commands WHERE " + unfinished).Scan(&ns); err != nil {
		return time.Time{}, false, err
	}
	if !ns.Valid {
		return time.Time{}, false, nil
	}
	return time.Unix(0, ns.Int64), true, nil
}

// WakeCommand makes an unfinished command due now. A command a worker
// holds (leased) gets the wake time too, so that the worker, seeing its
// next_attempt_at moved, runs it again at once instead of after its retry
// (a wake during a step is not lost).
func (t *Tx) WakeCommand(id string, now time.Time) error {
	_, err := t.exec("UPDATE commands SET next_attempt_at = ? WHERE command_id = ? AND "+unfinished+" AND (next_attempt_at > ? OR lease_until > ?)",
		now.UnixNano(), id, now.UnixNano(), now.UnixNano())
	return err
}

// WakeWaiting makes every WAITING command due now, leased ones as
// WakeCommand does.
func (t *Tx) WakeWaiting(now time.Time) error {
	_, err := t.exec("UPDATE commands SET next_attempt_at = ? WHERE state = 'COMMAND_STATE_WAITING' AND (next_attempt_at > ? OR lease_until > ?)",
		now.UnixNano(), now.UnixNano(), now.UnixNano())
	return err
}

// ReleaseLeases drops every command lease. Only a process that is the
// database's sole user (Store.Exclusive) may call it, at start: the leases
// are then those of a process that died.
func (t *Tx) ReleaseLeases() error {
	_, err := t.exec("UPDATE commands SET lease_owner = '', lease_until = 0 WHERE lease_until > 0")
	return err
}
