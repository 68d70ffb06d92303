package store

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Coalesced writes (issue 15; docs/PLACEMENT-LOOP.md, "Answers"). A
// transaction that applies the steps of many commands together
// (command.EndTogether) writes each command's row, its Workspace's and
// its runtime's: one statement each per command, five to seven a
// placement on SQLite's one writer and as many round trips to PostgreSQL.
// Coalesced, those rows are kept in the transaction and written at its
// end by one multi-row upsert per table and set of columns, whatever the
// number of commands.
//
// What the transaction reads stays what it wrote: a row read by its key
// (getBody, GetCommand) is answered from the rows kept, and any other
// statement that names a table with rows kept, or a table their triggers
// write (coalescedEffects), writes the rows kept first. A write whose
// outcome the caller needs (a conditional update, an insert that may find
// the row) is never kept.

// coalescedEffects are the tables written by the triggers of a table whose
// rows may be kept (reserved.go): a statement naming one of them must see
// the kept rows' effects, so it writes them first. A new trigger on these
// tables belongs here too.
var coalescedEffects = map[string][]string{
	"workspaces":        {"pool_reserved"},
	"workspace_runtime": {"pool_reserved"},
}

// maxCoalescedRows bounds the rows of one multi-row statement: 12 columns
// of commands give 3,072 parameters, under both databases' limits.
const maxCoalescedRows = 256

// coalesced are the rows a transaction keeps to write at its end.
type coalesced struct {
	// rows by table and key, in the order first written.
	rows  map[string]*keptRow
	order []string
	// tables counts the rows kept per table. It follows from rows, and is
	// kept because flushFor, run before every statement, checks these few
	// names rather than every row.
	tables map[string]int
	// commands are the command rows kept, for GetCommand.
	commands map[string]*CommandRow
}

// keptRow is one row to write: cols are the table's key first, set the
// columns an existing row takes, vals the values of cols. An insert
// (keepInsert) takes no existing row: set is nil and a row with its key
// fails the statement, and so the transaction.
type keptRow struct {
	table     string
	cols, set []string
	vals      []any
	insert    bool
}

// Coalesce makes t keep the rows its writes by key put (Workspaces,
// runtimes, commands' updates) and write them together before it commits,
// one statement per table and columns. Call it first in the transaction's
// function; what t reads stays what it wrote.
func (t *Tx) Coalesce() {
	if t.co == nil {
		t.co = &coalesced{rows: map[string]*keptRow{}, tables: map[string]int{}, commands: map[string]*CommandRow{}}
	}
}

// keep keeps a row instead of writing it, when t coalesces; false when it
// does not.
func (t *Tx) keep(table string, cols, set []string, vals ...any) bool {
	if t.co == nil {
		return false
	}
	id, _ := vals[0].(string)
	key := table + "\x00" + id
	if r, ok := t.co.rows[key]; ok {
		r.vals = vals
		if len(set) > len(r.set) {
			r.set = set // an earlier write may have changed indexed columns
		}
		return true
	}
	t.co.rows[key] = &keptRow{table: table, cols: cols, set: set, vals: vals}
	t.co.order = append(t.co.order, key)
	t.co.tables[table]++
	return true
}

// keepInsert keeps a new row instead of inserting it, when t coalesces on
// PostgreSQL; false when it does not. Written at the end, a row whose key
// exists fails the transaction there rather than at this call: a caller
// that coalesces (command's batches) then runs each of its parts alone,
// where the insert reports it at once.
//
// On SQLite the inserts are not kept: there a statement runs in this
// process and costs little once prepared, and the multi-row inserts that
// replaced a prepared insert each placed no more a second, with a longer
// tail (docs/PERFORMANCE.md); on PostgreSQL each statement is a round
// trip, and keeping them placed 1.12x.
func (t *Tx) keepInsert(table string, cols []string, vals ...any) (bool, error) {
	if t.co == nil || t.d.name == sqliteDialect.name {
		return false, nil
	}
	id, _ := vals[0].(string)
	key := table + "\x00" + id
	if _, ok := t.co.rows[key]; ok {
		return true, fmt.Errorf("store: %s %q inserted twice in one transaction", table, id)
	}
	t.co.rows[key] = &keptRow{table: table, cols: cols, vals: vals, insert: true}
	t.co.order = append(t.co.order, key)
	t.co.tables[table]++
	return true, nil
}

// columnNamedTables are tables whose name is also a column's of another
// table (node_placement.allocations): a statement names them only in a
// table clause, so that a statement on the other table does not write the
// rows kept first.
var columnNamedTables = map[string]*regexp.Regexp{
	"allocations": regexp.MustCompile(`\b(FROM|INTO|JOIN|UPDATE)\s+allocations\b`),
}

// names reports whether query names table.
func names(query, table string) bool {
	if re := columnNamedTables[table]; re != nil {
		return re.MatchString(query)
	}
	return strings.Contains(query, table)
}

// keptBody is the body of a row kept (its last value), if it is.
func (t *Tx) keptBody(table, id string) ([]byte, bool) {
	if t.co == nil {
		return nil, false
	}
	r, ok := t.co.rows[table+"\x00"+id]
	if !ok {
		return nil, false
	}
	return r.vals[len(r.vals)-1].([]byte), true
}

// keptCommand is a command row kept, as written, if it is.
func (t *Tx) keptCommand(id string) (*CommandRow, bool) {
	if t.co == nil {
		return nil, false
	}
	c, ok := t.co.commands[id]
	if !ok {
		return nil, false
	}
	return c.clone(), true
}

// flushFor writes the rows kept before query runs, when it names a table
// with rows kept or one their triggers write.
func (t *Tx) flushFor(query string) error {
	if t.co == nil || len(t.co.order) == 0 || t.flushing {
		return nil
	}
	for table := range t.co.tables {
		if names(query, table) {
			return t.flushKept()
		}
		for _, e := range coalescedEffects[table] {
			if strings.Contains(query, e) {
				return t.flushKept()
			}
		}
	}
	return nil
}

// flushKept writes every row kept: the rows of one table and the same
// columns by one statement (of at most maxCoalescedRows), tables in the
// order their first row was written.
func (t *Tx) flushKept() error {
	co := t.co
	if co == nil || len(co.order) == 0 {
		return nil
	}
	// The rows kept were told to the hot rows as they were kept (putRow):
	// their statements leave those alone.
	hotKeyed := t.hotKeyed
	t.flushing, t.hotKeyed = true, true
	defer func() { t.flushing, t.hotKeyed = false, hotKeyed }()
	type shape struct {
		table, cols, set string
		insert           bool
	}
	var shapes []shape
	byShape := map[shape][]*keptRow{}
	for _, key := range co.order {
		r := co.rows[key]
		sh := shape{r.table, strings.Join(r.cols, ","), strings.Join(r.set, ","), r.insert}
		if _, ok := byShape[sh]; !ok {
			shapes = append(shapes, sh)
		}
		byShape[sh] = append(byShape[sh], r)
	}
	t.keptWritten(co)
	co.rows, co.order, co.tables, co.commands = map[string]*keptRow{}, nil, map[string]int{}, map[string]*CommandRow{}
	for _, sh := range shapes {
		for rows := range slices.Chunk(byShape[sh], maxCoalescedRows) {
			if err := t.upsertRows(rows); err != nil {
				return err
			}
		}
	}
	return nil
}

// upsertRows writes rows of one table and the same columns in one
// statement.
func (t *Tx) upsertRows(rows []*keptRow) error {
	r := rows[0]
	var sets []string
	for _, c := range r.set {
		sets = append(sets, c+" = excluded."+c)
	}
	tuple := "(" + marks(len(r.cols)) + ")"
	q := "INSERT INTO " + r.table + " (" + strings.Join(r.cols, ", ") + ") VALUES " +
		strings.TrimSuffix(strings.Repeat(tuple+", ", len(rows)), ", ")
	if !r.insert {
		q += " ON CONFLICT (" + r.cols[0] + ") DO UPDATE SET " + strings.Join(sets, ", ")
	}
	args := make([]any, 0, len(rows)*len(r.cols))
	for _, row := range rows {
		args = append(args, row.vals...)
	}
	if len(rows) <= maxPreparedRows {
		_, err := t.exec(q, args...)
		return err
	}
	_, err := t.execUnprepared(q, args...)
	return err
}

// maxPreparedRows is the most rows of a multi-row write kept prepared
// (statements). A batch of admissions writes one or two rows before each
// member's pool reservation (which must see them): parsed each time, with
// the triggers SQLite compiles into every statement that fires them, those
// few-row statements were 12% of ctrl's CPU at 10,000 nodes on SQLite
// (docs/PERFORMANCE.md). Larger batches are rarer and their texts many.
const maxPreparedRows = 8
