package store

import (
	"errors"
	"maps"
	"slices"
)

// Rows read together (issue 15; docs/PLACEMENT-LOOP.md, "Answers"). A
// transaction that ends many commands together (command.SucceedTogether)
// read, for each, its command's row, its Workspace's and its runtime's,
// one statement each, and on PostgreSQL one round trip and one row lock
// each: three of a placement's twelve statements there. Prefetch reads
// the rows of one table that the transaction names in one statement
// (locked where the database locks rows read for writing: the transaction
// writes them), and the reads by key that follow are answered from them.
//
// What the transaction reads stays what it wrote: a row it keeps to write
// (Coalesce) is answered first, as before; rows kept that are written
// replace the ones prefetched; and any other statement that writes a
// table drops what was prefetched of it, which is then read again.

// A Row names one row a transaction will read by its key (Prefetch).
type Row struct{ table, id string }

// RowOfCommand is command id's row.
func RowOfCommand(id string) Row { return Row{"commands", id} }

// RowsOfWorkspace are Workspace id's row and its runtime's.
func RowsOfWorkspace(id string) []Row {
	return []Row{{"workspaces", id}, {"workspace_runtime", id}}
}

// prefetchKeys are the tables Prefetch reads, by their key column.
var prefetchKeys = map[string]string{"commands": "command_id", "workspaces": "workspace_id", "workspace_runtime": "workspace_id"}

// maxPrefetchRows bounds the keys of one statement.
const maxPrefetchRows = 500

// prefetched are the rows a transaction read ahead: bodies by table and
// key, and command rows by id.
type prefetched struct {
	bodies   map[string]map[string][]byte
	commands map[string]*CommandRow
}

// Prefetch reads rows, one statement per table, so that the reads by key
// of those rows that follow in t cost no statement (above). A row that
// does not exist is read again when asked for. On SQLite the rows the
// hot-row cache serves (hotRows) are not prefetched: they cost nothing
// already.
func (t *Tx) Prefetch(rows []Row) error {
	byTable := map[string][]string{}
	for _, r := range rows {
		if _, ok := prefetchKeys[r.table]; !ok {
			return errors.New("store: Prefetch of a table it does not read: " + r.table)
		}
		if t.hot != nil && isHot(r.table) {
			continue
		}
		byTable[r.table] = append(byTable[r.table], r.id)
	}
	if t.pre == nil && len(byTable) > 0 {
		t.pre = &prefetched{bodies: map[string]map[string][]byte{}, commands: map[string]*CommandRow{}}
	}
	for _, table := range slices.Sorted(maps.Keys(byTable)) {
		ids := slices.Compact(slices.Sorted(slices.Values(byTable[table])))
		for chunk := range slices.Chunk(ids, maxPrefetchRows) {
			if err := t.prefetch(table, chunk); err != nil {
				return err
			}
		}
	}
	return nil
}

// prefetch reads ids of table, keys sorted: two transactions locking rows
// of one table take them in the same order.
func (t *Tx) prefetch(table string, ids []string) error {
	key := prefetchKeys[table]
	cols := key + ", body"
	if table == "commands" {
		cols = commandCols
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := t.query("SELECT "+cols+" FROM "+table+" WHERE "+key+" IN ("+marks(len(ids))+") ORDER BY "+key+t.d.lock, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if table == "commands" {
			c, err := scanCommand(rows)
			if err != nil {
				return err
			}
			t.pre.commands[c.GetCommandId()] = c
			continue
		}
		var id string
		var body []byte
		if err := rows.Scan(&id, &body); err != nil {
			return err
		}
		if t.pre.bodies[table] == nil {
			t.pre.bodies[table] = map[string][]byte{}
		}
		t.pre.bodies[table][id] = body
	}
	return rows.Err()
}

// prefetchedBody is row id of table as prefetched, if it was.
func (t *Tx) prefetchedBody(table, id string) ([]byte, bool) {
	if t.pre == nil {
		return nil, false
	}
	body, ok := t.pre.bodies[table][id]
	return body, ok
}

// prefetchedCommand is a copy of command id's row as prefetched, if it
// was.
func (t *Tx) prefetchedCommand(id string) (*CommandRow, bool) {
	if t.pre == nil {
		return nil, false
	}
	c, ok := t.pre.commands[id]
	if !ok {
		return nil, false
	}
	return c.clone(), true
}

// dropPrefetchedIfWrites forgets what was prefetched of the tables query
// writes (a statement other than a SELECT that names one).
func (t *Tx) dropPrefetchedIfWrites(query string) {
	if t.pre == nil || t.flushing {
		return
	}
	if writesOneOf(query, []string{"commands"}) {
		clear(t.pre.commands)
	}
	for table := range t.pre.bodies {
		if writesOneOf(query, []string{table}) {
			delete(t.pre.bodies, table)
		}
	}
}

// keptWritten notes, as flushKept writes them, the rows kept that were
// prefetched: what is prefetched of them is now what they hold.
func (t *Tx) keptWritten(co *coalesced) {
	if t.pre == nil {
		return
	}
	for id, c := range co.commands {
		if _, ok := t.pre.commands[id]; ok {
			t.pre.commands[id] = c
		}
	}
	for _, r := range co.rows {
		id, _ := r.vals[0].(string)
		if _, ok := t.pre.bodies[r.table][id]; ok && r.table != "commands" {
			t.pre.bodies[r.table][id] = r.vals[len(r.vals)-1].([]byte)
		}
	}
}
