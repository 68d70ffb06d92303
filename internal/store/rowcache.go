package store

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// rowCache keeps, for SQLite's writing connection, the catalog and setting
// rows that every placement reads and hardly anything writes: a Template,
// its revision, the default PlatformKey and its Launch, the overcommit
// defaults. They were eight of the ~35 statements a placement ran on the
// one writer (docs/PERFORMANCE.md).
//
// It is kept only where the store sees every write: SQLite's group-commit
// members (runMember), which run one at a time on the one connection. A
// statement that writes one of the cached tables (cachedTables, found in
// its text) drops every row kept, and so does a member that fails or a
// group that does (their writes undone, rows read after them may have
// included them). A row read by a member of a group not yet committed may
// hold that group's writes: only the group's later members, and later
// groups, read the cache, and a group that fails drops it. Snapshot's
// reader connections read the database. On PostgreSQL, where other
// replicas write, each transaction keeps a rowCache of its own (tryTx),
// so that it reads each row once: a placement's admission read the same
// Template, revision and Launch twice.
type rowCache struct {
	mu sync.Mutex
	// gen counts the drops: a row read while one happened is not kept.
	gen uint64
	// rows are the rows kept by query and args: each its scanned columns,
	// nil for no row.
	rows map[string][]any
}

// cachedTables are the tables whose rows the cache may keep.
var cachedTables = []string{"catalog_templates", "catalog_template_revisions", "catalog_platform_keys", "catalog_launches", "settings"}

// maxCachedRows bounds the rows kept: past it the cache starts again.
const maxCachedRows = 4096

// drop forgets every row kept.
func (c *rowCache) drop() {
	c.mu.Lock()
	c.gen++
	c.rows = nil
	c.mu.Unlock()
}

// dropIfWrites drops the rows kept when query writes a cached table.
func (c *rowCache) dropIfWrites(query string) {
	if writesOneOf(query, cachedTables) {
		c.drop()
	}
}

// writesOneOf reports whether query, a statement other than a SELECT,
// names one of tables.
func writesOneOf(query string, tables []string) bool {
	if strings.HasPrefix(strings.TrimSpace(query), "SELECT") {
		return false
	}
	for _, table := range tables {
		if strings.Contains(query, table) {
			return true
		}
	}
	return false
}

// cachedScan is queryRow(query, args...).Scan(dest...) for a read of a
// cached table by key, answered from the cache when t is a SQLite member
// and the row is kept. dest may hold *[]byte, *int64 and *string; args
// are strings.
func (t *Tx) cachedScan(query string, args []any, dest ...any) error {
	c := t.cache
	var key string
	ok := c != nil
	if ok {
		key, ok = cacheKey(query, args)
	}
	if !ok {
		return t.queryRow(query, args...).Scan(dest...)
	}
	c.mu.Lock()
	values, hit := c.rows[key]
	gen := c.gen
	c.mu.Unlock()
	if hit {
		if values == nil {
			return sql.ErrNoRows
		}
		return copyInto(dest, values)
	}
	err := t.queryRow(query, args...).Scan(dest...)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if err == nil {
		values = copyOut(dest)
	}
	c.mu.Lock()
	if c.gen == gen {
		if c.rows == nil || len(c.rows) >= maxCachedRows {
			c.rows = map[string][]any{}
		}
		c.rows[key] = values
	}
	c.mu.Unlock()
	return err
}

// cacheKey is the cache's key of a query with string args.
func cacheKey(query string, args []any) (string, bool) {
	var b strings.Builder
	b.WriteString(query)
	for _, a := range args {
		s, ok := a.(string)
		if !ok {
			return "", false
		}
		b.WriteByte(0)
		b.WriteString(s)
	}
	return b.String(), true
}

// copyOut copies the values scanned into dest.
func copyOut(dest []any) []any {
	out := make([]any, len(dest))
	for i, d := range dest {
		switch p := d.(type) {
		case *[]byte:
			out[i] = append([]byte(nil), *p...)
		case *int64:
			out[i] = *p
		case *string:
			out[i] = *p
		default:
			panic(fmt.Sprintf("store: cachedScan cannot keep a %T", d))
		}
	}
	return out
}

// copyInto sets dest from values kept, each []byte a copy of its own.
func copyInto(dest, values []any) error {
	for i, d := range dest {
		switch p := d.(type) {
		case *[]byte:
			*p = append([]byte(nil), values[i].([]byte)...)
		case *int64:
			*p = values[i].(int64)
		case *string:
			*p = values[i].(string)
		}
	}
	return nil
}

// hotRows keeps, for SQLite's writing connection, the bodies of the rows
// a command reads again in each of its transactions after writing them:
// Workspaces and their runtimes. A create placed at its admission writes
// both there, and the transaction that ends it read both again: two of the
// ~15 statements a placement ran on the one writer (issue 15). A row is
// kept when a member reads it (getBody) and as a member writes it
// (putRow), so a read after a write is answered from memory.
//
// It holds what the connection reads, as rowCache does: only group
// members use it, one at a time on the one connection, so a row kept may
// hold writes of the group not committed yet. A member that fails forgets
// the rows it wrote (they are undone); a group that fails forgets every
// row. A statement that writes a kept table other than putRow's keyed
// writes (none today) forgets every row, found by its text.
type hotRows struct {
	mu sync.Mutex
	// gen counts the drops: a row read while one happened is not kept.
	gen  uint64
	rows map[string][]byte
}

// hotTables are the tables whose rows hotRows keeps.
var hotTables = []string{"workspaces", "workspace_runtime"}

// maxHotRows bounds the rows kept: past it the cache starts again. A
// placement keeps two, so this holds far more than the placements in
// flight.
const maxHotRows = 16384

func isHot(table string) bool { return slices.Contains(hotTables, table) }

func hotKey(table, id string) string { return table + "\x00" + id }

// get answers the body kept of row id of table, and the generation to
// keep one read now under.
func (h *hotRows) get(table, id string) (body []byte, gen uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	body, ok = h.rows[hotKey(table, id)]
	return body, h.gen, ok
}

// keep keeps body, read under generation gen, unless a drop happened since.
func (h *hotRows) keep(table, id string, body []byte, gen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen == gen {
		h.set(hotKey(table, id), body)
	}
}

// wrote keeps body, just written, as row id of table.
func (h *hotRows) wrote(table, id string, body []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.set(hotKey(table, id), body)
}

func (h *hotRows) set(key string, body []byte) {
	if h.rows == nil || len(h.rows) >= maxHotRows {
		h.rows = map[string][]byte{}
	}
	h.rows[key] = body
}

// forget forgets the rows of keys (hotKey).
func (h *hotRows) forget(keys []string) {
	if len(keys) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen++
	for _, k := range keys {
		delete(h.rows, k)
	}
}

// drop forgets every row kept.
func (h *hotRows) drop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen++
	h.rows = nil
}

// dropIfWrites drops every row kept when query writes a kept table.
func (h *hotRows) dropIfWrites(query string) {
	if writesOneOf(query, hotTables) {
		h.drop()
	}
}
