// Package store keeps ctrl's durable state in SQL: SQLite embedded by default
// (pure Go, one file, WAL) or PostgreSQL for production, where several ctrl
// replicas share one database. The same queries and the same conformance
// suite (storetest) serve both.
//
// Records are protobuf messages stored as bytes, with the columns queries
// filter, order or lock on beside them.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrNotFound is returned when a record does not exist.
var ErrNotFound = errors.New("not found")

//go:embed migrations/*.sql
var migrations embed.FS

// Store is an open database.
type Store struct {
	db *sql.DB
	d  dialect
	// lock holds a SQLite database for this process alone.
	lock *os.File
	// stmts are the statements kept prepared (SQLite; nil on PostgreSQL).
	stmts *statements
	// readers are SQLite connections for Snapshot, which only reads, and
	// readStmts their prepared statements; nil on PostgreSQL.
	readers   *sql.DB
	readStmts *statements
	// stats counts the transactions and the time they held a connection.
	stats txStats
	// changes tells this process's waiters of committed writes.
	changes changes
	// group shares commits between concurrent transactions (SQLite).
	group grouper
	// index mirrors node_placement for placement (placeindex.go).
	index placeIndex
	// cache keeps catalog rows for SQLite's writer, hot the rows a
	// command reads again after writing them (rowcache.go).
	cache rowCache
	hot   hotRows
	// stop ends the work the store does in the background (background),
	// nil for none.
	stop       context.CancelFunc
	background sync.WaitGroup
}

// Open connects to dsn and brings its schema up to date. A dsn starting with
// postgres:// or postgresql:// is PostgreSQL (pgx); anything else is a SQLite
// file path, optionally prefixed with sqlite:.
func Open(ctx context.Context, dsn string) (*Store, error) {
	var s *Store
	var err error
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		s, err = openPostgres(dsn)
	} else {
		s, err = openSQLite(strings.TrimPrefix(dsn, "sqlite:"))
	}
	if err != nil {
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// postgresConns is how many connections a ctrl holds to PostgreSQL.
const postgresConns = 16

func openPostgres(dsn string) (*Store, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	// Every connection stays open once made: database/sql keeps only two
	// idle by default, so under load the others were closed as they came
	// back and opened again for the next transaction, each a new server
	// process forked, its caches cold and its statements prepared again.
	db.SetMaxOpenConns(postgresConns)
	db.SetMaxIdleConns(postgresConns)
	// Other replicas write placement rows too: the mirror is read whole
	// again at most this old (placeindex.go).
	ctx, stop := context.WithCancel(context.Background())
	s := &Store{db: db, d: postgres, index: placeIndex{maxAge: postgresIndexAge}, stop: stop}
	s.background.Add(1)
	go func() {
		defer s.background.Done()
		s.reloadIndex(ctx)
	}()
	return s, nil
}

// openSQLite opens one file in WAL mode. A single connection serialises
// every transaction: SQLite has one writer anyway, and this rules out
// SQLITE_BUSY between our own transactions. An exclusive lock on
// <path>.lock keeps a second ctrl off the same file: replicas share
// PostgreSQL, never SQLite. temp_store(MEMORY) keeps the statement
// journal of each group-commit SAVEPOINT (group.go) in memory: on a file
// it was written past 64 KiB with a syscall per page, 6% of the CPU of a
// placement (docs/PERFORMANCE.md).
func openSQLite(path string) (*Store, error) {
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("SQLite database %s is in use by another process (replicas must share PostgreSQL): %w", path, err)
	}
	if err := privateFiles(path); err != nil {
		lock.Close()
		return nil, err
	}
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(ON)", "busy_timeout(10000)", "temp_store(MEMORY)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		lock.Close()
		return nil, err
	}
	db.SetMaxOpenConns(1)
	readers, err := openReaders(path)
	if err != nil {
		db.Close()
		lock.Close()
		return nil, err
	}
	return &Store{db: db, d: sqliteDialect, lock: lock, stmts: newStatements(), readers: readers, readStmts: newStatements()}, nil
}

// postgresIndexAge is how old the placement mirror may grow on
// PostgreSQL before it is read whole again: another replica's writes reach
// it no other way (a charge the table refuses marks that node alone).
const postgresIndexAge = 30 * time.Second

// readerConns is how many connections serve Snapshot on SQLite.
const readerConns = 4

// openReaders opens the connections Snapshot reads through on SQLite. In
// WAL mode readers do not wait for the writer, nor it for them, and each
// reads the database as its last commit left it: a read such as
// WaitWorkspace's no longer queues for the one writing connection behind
// the writes and their commits, and runs on another core meanwhile. It
// sees every write whose caller has returned, since a group's members
// return only after their commit. query_only refuses a write by mistake.
func openReaders(path string) (*sql.DB, error) {
	q := url.Values{}
	for _, p := range []string{"busy_timeout(10000)", "temp_store(MEMORY)", "query_only(1)"} {
		q.Add("_pragma", p)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(readerConns)
	db.SetMaxIdleConns(readerConns)
	return db, nil
}

// sqliteFiles are the suffixes of a database's files: the database itself,
// its WAL, the WAL's shared-memory index, and a rollback journal (none in
// WAL mode, but one an older file may have left).
var sqliteFiles = []string{"", "-wal", "-shm", "-journal"}

// privateFiles makes the database file at path, and the files SQLite keeps
// beside it, readable and writable by their owner only: they hold secrets
// (docs/RELIABILITY.md, "Secrets at rest"). A missing database file is
// created 0600 before SQLite opens it, since SQLite would make it 0644 less
// the umask; SQLite's unix VFS gives the -wal, -shm and -journal files it
// creates the main file's mode. Files an earlier version left open to group
// or others lose those permissions (0644 becomes 0600) at every open.
func privateFiles(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	for _, suffix := range sqliteFiles {
		st, err := os.Stat(path + suffix)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(path+suffix, st.Mode().Perm()&^0o077); err != nil {
				return fmt.Errorf("make %s private: %w", path+suffix, err)
			}
		}
	}
	return nil
}

// Close closes the database.
func (s *Store) Close() error {
	if s.stop != nil {
		s.stop()
		s.background.Wait()
	}
	s.stmts.close()
	s.readStmts.close()
	if s.readers != nil {
		s.readers.Close()
	}
	err := s.db.Close()
	if s.lock != nil {
		s.lock.Close()
	}
	return err
}

// Exclusive reports whether this process is the database's only user (a
// SQLite file), so leases held by an earlier process are stale.
func (s *Store) Exclusive() bool { return s.lock != nil }

// Dialect names the database kind: "sqlite" or "postgres".
func (s *Store) Dialect() string { return s.d.name }

// migrate applies the embedded migrations not applied yet, in order, each in
// its own transaction. On PostgreSQL an advisory lock keeps two replicas
// starting together from applying the same one twice.
func (s *Store) migrate(ctx context.Context) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if s.d.name == "postgres" {
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(7670)"); err != nil {
			return err
		}
		defer conn.ExecContext(context.Background(), "SELECT pg_advisory_unlock(7670)")
	}
	if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY)"); err != nil {
		return err
	}
	applied := map[int]bool{}
	rows, err := conn.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return err
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return err
		}
		applied[v] = true
	}
	rows.Close()
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		version, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(name, "migrations/"), "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: name must start with a number", name)
		}
		if applied[version] {
			continue
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		if err := s.applyMigration(ctx, conn, version, s.d.schema(string(body)), migrationHooks[version]); err != nil {
			return fmt.Errorf("migration %s: %w", name, err)
		}
	}
	if s.d.name == "postgres" {
		return byteOrder(ctx, conn)
	}
	return nil
}

// byteOrder gives every text column byte-order collation ("C") on
// PostgreSQL. The API orders lists by ids and names, and pages them by
// comparing with the last one, in byte order: SQLite's default. A
// PostgreSQL database's default collation is its locale's (en_US sorts
// "aa" before "a-b"), which would change the order of every list. Columns
// already in "C" are left alone, so this costs one query after the first
// start and covers the columns of later migrations too.
func byteOrder(ctx context.Context, conn *sql.Conn) error {
	rows, err := conn.QueryContext(ctx, `SELECT table_name, column_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND data_type = 'text' AND (collation_name IS NULL OR collation_name <> 'C')
		ORDER BY table_name, column_name`)
	if err != nil {
		return err
	}
	var alters []string
	for rows.Next() {
		var table, column string
		if err := rows.Scan(&table, &column); err != nil {
			rows.Close()
			return err
		}
		alters = append(alters, fmt.Sprintf(`ALTER TABLE %q ALTER COLUMN %q TYPE TEXT COLLATE "C"`, table, column))
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(alters) == 0 {
		return err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, a := range alters {
		if _, err := tx.ExecContext(ctx, a); err != nil {
			return fmt.Errorf("byte-order collation: %w in %s", err, a)
		}
	}
	return tx.Commit()
}

// migrationHooks are the Go steps of a migration, run after its SQL in the
// same transaction: what SQL cannot do, such as reading protobuf bodies.
var migrationHooks = map[int]func(*sql.Tx, dialect) error{
	4:  backfillRuntimeNodes,
	7:  backfillPools,
	8:  backfillPlacement,
	14: backfillPoolReserved,
	16: backfillGrantEnrollments,
	17: backfillLeases,
}

func (s *Store) applyMigration(ctx context.Context, conn *sql.Conn, version int, body string, hook func(*sql.Tx, dialect) error) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, stmt := range strings.Split(body, ";") {
		if strings.TrimSpace(stripComments(stmt)) == "" {
			continue
		}
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%w in %s", err, strings.TrimSpace(stmt))
		}
	}
	if hook != nil {
		if err := hook(tx, s.d); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind("INSERT INTO schema_migrations (version) VALUES (?)"), version); err != nil {
		return err
	}
	return tx.Commit()
}

func stripComments(stmt string) string {
	var b strings.Builder
	for _, line := range strings.Split(stmt, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
			b.WriteString("\n")
		}
	}
	return b.String()
}

// Tx runs fn in one transaction and commits it. A serialization failure or
// deadlock (PostgreSQL) or a busy database (SQLite) retries fn from the start,
// so fn must have no effect outside the transaction.
func (s *Store) Tx(ctx context.Context, fn func(*Tx) error) error {
	return s.run(ctx, nil, fn)
}

// Snapshot runs fn, which only reads, in one transaction whose every
// statement reads the same snapshot of the database. On PostgreSQL a Tx is
// READ COMMITTED, where each statement sees what committed before it
// began: two reads in one Tx may straddle another transaction's commit
// (a command read failed by a delete whose Workspace was read before it).
// On SQLite every transaction reads one snapshot already, and a Snapshot
// runs on a reader connection (openReaders), beside the writes.
func (s *Store) Snapshot(ctx context.Context, fn func(*Tx) error) error {
	if s.readers != nil {
		defer s.readStmts.prepareWanted(context.WithoutCancel(ctx), s.readers)
		return s.read(ctx, fn)
	}
	return s.run(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}, fn)
}

// read runs fn in a transaction of a SQLite reader connection. It is not
// retried: readers in WAL mode are never busy, and fn's writes are refused.
// Its time is not counted in Stats.Held, which is the writer's.
func (s *Store) read(ctx context.Context, fn func(*Tx) error) error {
	sqlTx, err := s.readers.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	s.stats.began()
	defer sqlTx.Rollback()
	return (&Tx{ctx: ctx, tx: sqlTx, d: s.d, stmts: s.readStmts}).finish(fn)
}

func (s *Store) run(ctx context.Context, opts *sql.TxOptions, fn func(*Tx) error) error {
	var err error
	defer s.stmts.prepareWanted(context.WithoutCancel(ctx), s.db)
	for attempt := 0; attempt < 8; attempt++ {
		err = s.tryTx(ctx, opts, fn)
		if err == nil || !s.d.retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 5 * time.Millisecond):
		}
	}
	return err
}

func (s *Store) tryTx(ctx context.Context, opts *sql.TxOptions, fn func(*Tx) error) error {
	if s.lock != nil {
		return s.groupTx(ctx, fn)
	}
	sqlTx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	s.stats.began()
	defer s.stats.heldFor(time.Now())
	// Its own catalog rows (rowcache.go), kept for this transaction only:
	// another replica may write them between two transactions, but a
	// placement's admission read the same Template, revision and Launch
	// twice, each a round trip (issue 15).
	tx := &Tx{ctx: ctx, tx: sqlTx, d: s.d, stmts: s.stmts, index: &s.index, cache: &rowCache{}}
	if opts == nil {
		tx.stats = &s.stats
	}
	defer func() { s.index.settle(tx.charged) }()
	if err := tx.finish(fn); err != nil {
		_ = sqlTx.Rollback()
		tx.rolledBack()
		return err
	}
	if err := sqlTx.Commit(); err != nil {
		tx.rolledBack()
		return err
	}
	s.stats.committed()
	s.index.committed(tx.patches)
	s.changes.committed(tx.written)
	return nil
}

// Tx is one open transaction.
type Tx struct {
	ctx   context.Context
	tx    *sql.Tx
	d     dialect
	stmts *statements
	// written are the ids of the Workspaces (and command targets) it
	// wrote, told to waiters once it commits.
	written []string
	// refs are the policy_references rows of the Workspaces it read
	// locked or wrote (putPolicyReferences).
	refs map[string][][2]string
	// indexed are the indexed column values of rows it knows (putRow).
	indexed map[string]string
	// index is the Store's placement mirror (nil in a Snapshot); patches
	// are this transaction's writes to it, applied once it commits; read
	// are the rows it read into it (readAll: every row), forgotten if it
	// rolls back.
	index   *placeIndex
	patches []placementPatch
	read    []string
	readAll bool
	// charged are the nodes it charged through the mirror (settle).
	charged []string
	// cache is the Store's catalog rows, for a SQLite group member; on
	// PostgreSQL the transaction's own; nil on SQLite's readers
	// (rowcache.go).
	cache *rowCache
	// hot is the Store's hot rows, for a SQLite group member; nil
	// elsewhere (rowcache.go). hotWritten are the rows t wrote into it
	// (forgotten if t fails), and hotKeyed is set while putRow writes
	// one, which it keeps itself.
	hot        *hotRows
	hotWritten []string
	hotKeyed   bool
	// last are the writes to run once the caller's fn returned (Last).
	last []func(*Tx) error
	// co are the rows kept to write at its end (Coalesce), nil when it
	// writes each at once; flushing is set while it writes them, and
	// coErr is a failure to write them before a read (queryRow), which
	// fails the transaction.
	co       *coalesced
	flushing bool
	coErr    error
	// pre are the rows it read ahead (Prefetch), nil for none.
	pre *prefetched
	// ledger counts its reservations by pool, and ledgerServed are the
	// pools a count answered a read of, checked at its end (ledger.go).
	ledger       map[string]*poolLedger
	ledgerServed map[string]StoragePool
	// stats counts its statements (Stats.Statements); nil for a
	// Snapshot's.
	stats *txStats
}

// Last runs fn in t once everything else t's caller does returned,
// just before the commit; an error rolls t back as the caller's would. It
// is for a write that takes a row lock many transactions queue for (a
// shared storage pool's, on PostgreSQL): taken last, the lock is held for
// the commit, not for the rest of the transaction.
func (t *Tx) Last(fn func(*Tx) error) { t.last = append(t.last, fn) }

// finish runs fn, then the writes it left for last.
func (t *Tx) finish(fn func(*Tx) error) error {
	if err := fn(t); err != nil {
		return err
	}
	for i := 0; i < len(t.last); i++ { // a last write may add another
		if err := t.last[i](t); err != nil {
			return err
		}
	}
	if t.coErr != nil {
		return t.coErr
	}
	if err := t.flushKept(); err != nil {
		return err
	}
	return t.checkLedger()
}

// rolledBack forgets what t read into the placement mirror: it may have
// included t's own writes, now undone.
func (t *Tx) rolledBack() {
	switch {
	case t.readAll:
		t.index.forget(nil)
	case len(t.read) > 0:
		t.index.forget(t.read)
	}
}

// dropIfWrites drops what the caches keep of the tables query writes.
func (t *Tx) dropIfWrites(query string) {
	t.dropPrefetchedIfWrites(query)
	t.dropLedgerIfWrites(query)
	if t.cache != nil {
		t.cache.dropIfWrites(query)
	}
	if t.hot != nil && !t.hotKeyed {
		t.hot.dropIfWrites(query)
	}
}

func (t *Tx) exec(query string, args ...any) (sql.Result, error) {
	if err := t.flushFor(query); err != nil {
		return nil, err
	}
	t.dropIfWrites(query)
	t.ran()
	if st := t.stmts.get(query); st != nil {
		return t.tx.StmtContext(t.ctx, st).ExecContext(t.ctx, args...)
	}
	return t.tx.ExecContext(t.ctx, t.d.rebind(query), args...)
}

// execUnprepared runs a statement whose text varies from call to call,
// which is not worth keeping prepared.
func (t *Tx) execUnprepared(query string, args ...any) (sql.Result, error) {
	if err := t.flushFor(query); err != nil {
		return nil, err
	}
	t.dropIfWrites(query)
	t.ran()
	return t.tx.ExecContext(t.ctx, t.d.rebind(query), args...)
}

func (t *Tx) query(query string, args ...any) (*sql.Rows, error) {
	if err := t.flushFor(query); err != nil {
		return nil, err
	}
	t.dropPrefetchedIfWrites(query) // a write … RETURNING
	t.ran()
	return t.tx.QueryContext(t.ctx, t.d.rebind(query), args...)
}

// queryStrings runs a query of one text column and returns its values.
func (t *Tx) queryStrings(query string, args ...any) ([]string, error) {
	rows, err := t.query(query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// queryDrained is query for callers that read every row and close them
// before the transaction runs any other statement: it may use a prepared
// statement, which another run of the same query would reset under rows
// still open. Placement's candidate pages and a node's pending operations
// are read this way on every placement: parsing them was 7% of ctrl's CPU,
// all of it on SQLite's one connection.
func (t *Tx) queryDrained(query string, args ...any) (*sql.Rows, error) {
	if err := t.flushFor(query); err != nil {
		return nil, err
	}
	if st := t.stmts.get(query); st != nil {
		t.ran()
		return t.tx.StmtContext(t.ctx, st).QueryContext(t.ctx, args...)
	}
	return t.query(query, args...)
}

func (t *Tx) queryRow(query string, args ...any) *sql.Row {
	if err := t.flushFor(query); err != nil && t.coErr == nil {
		t.coErr = err // the read may miss the rows kept: the transaction fails
	}
	return t.pointRow(query, args...)
}

// pointRow is queryRow for a read of one row by its key that is not one
// of the rows kept (Coalesce): what t keeps to write cannot change it, so
// nothing is written first.
func (t *Tx) pointRow(query string, args ...any) *sql.Row {
	t.dropPrefetchedIfWrites(query) // a write … RETURNING
	t.ran()
	if st := t.stmts.get(query); st != nil {
		return t.tx.StmtContext(t.ctx, st).QueryRowContext(t.ctx, args...)
	}
	return t.tx.QueryRowContext(t.ctx, t.d.rebind(query), args...)
}

// dialect is what differs between SQLite and PostgreSQL.
type dialect struct {
	name  string
	bytes string
	// lock is appended to a SELECT that reads a row to change it.
	lock string
	// skipLocked is appended to a SELECT that claims work.
	skipLocked string
	// position is the function answering where a string holds another
	// (1-based, 0 for nowhere).
	position string
}

var (
	sqliteDialect = dialect{name: "sqlite", bytes: "BLOB", position: "instr"}
	postgres      = dialect{name: "postgres", bytes: "BYTEA", lock: " FOR UPDATE", skipLocked: " FOR UPDATE SKIP LOCKED", position: "strpos"}
)

func (d dialect) schema(body string) string { return strings.ReplaceAll(body, "{{BYTES}}", d.bytes) }

// rebind turns ? placeholders into $1, $2, … for PostgreSQL. Queries here
// never contain a literal question mark.
func (d dialect) rebind(q string) string {
	if d.name != "postgres" {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (d dialect) retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "40001" || pgErr.Code == "40P01"
	}
	var sqlErr *sqlite.Error
	if errors.As(err, &sqlErr) {
		code := sqlErr.Code() & 0xff
		return code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED
	}
	return false
}
