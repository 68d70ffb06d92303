package store

import (
	"database/sql"
	"errors"
	"fmt"
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
// reader connections and PostgreSQL (where other replicas write) read the
// database.
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
	if strings.HasPrefix(strings.TrimSpace(query), "SELECT") {
		return
	}
	for _, table := range cachedTables {
		if strings.Contains(query, table) {
			c.drop()
			return
		}
	}
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
