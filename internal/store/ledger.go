package store

import "fmt"

// A transaction's pool reservations counted in memory (issue 15;
// docs/PLACEMENT-LOOP.md, "Admissions together"). A batch of admissions
// reserves a layer in the shared pool for each of its members, and each
// reservation read the pool and the counter the objects' triggers keep:
// to include the members before it, the rows those had kept to write
// (Coalesce) were written first, one single-row statement each. So the
// first reservation in a pool reads the database; the transaction then
// counts what it reserves there (ReservedInPool), and its next reads of
// the pool add that count to what it read, with no statement. The pool's
// row is locked by the first read on PostgreSQL, and SQLite has one
// writer: nothing else changes the pool meanwhile.
//
// The count is checked, not trusted: a transaction whose reads were
// answered so reads the pool's counter again once its rows are written
// (finish), and fails should the pool hold more than its capacity
// (ErrReservationsExceed). A statement that writes the pool or a move
// into it drops the count (it is read again).

// poolLedger is what a transaction read of one pool and reserved there.
type poolLedger struct {
	pool     StoragePool
	reserved uint64 // read, plus what the transaction reserved since
}

// ErrReservationsExceed fails a transaction whose reservations, counted in
// memory, put a pool past its capacity once written: the count missed a
// write. The caller's retry, alone, reads the pool.
var ErrReservationsExceed = fmt.Errorf("store: the reservations counted in memory exceed a pool's capacity once written")

// ledgerRead answers StoragePoolForReservation from the count, when the
// transaction read name before.
func (t *Tx) ledgerRead(name string) (*StoragePool, uint64, bool) {
	l := t.ledger[name]
	if l == nil {
		return nil, 0, false
	}
	if t.ledgerServed == nil {
		t.ledgerServed = map[string]StoragePool{}
	}
	t.ledgerServed[name] = l.pool
	p := l.pool
	return &p, l.reserved, true
}

// ledgerKeep starts the count of pool p, read with reserved.
func (t *Tx) ledgerKeep(p *StoragePool, reserved uint64) {
	if t.ledger == nil {
		t.ledger = map[string]*poolLedger{}
	}
	t.ledger[p.Name] = &poolLedger{pool: *p, reserved: reserved}
}

// ReservedInPool counts bytes admitted in pool name by this transaction
// (after StoragePoolForReservation read it; the caller writes the object
// that holds them): its next read of the pool includes them.
func (t *Tx) ReservedInPool(name string, bytes uint64) {
	if l := t.ledger[name]; l != nil {
		l.reserved += bytes
	}
}

// dropLedgerIfWrites forgets the counts when query writes a pool or a move
// into one.
func (t *Tx) dropLedgerIfWrites(query string) {
	if len(t.ledger) > 0 && writesOneOf(query, []string{"storage_pools", "pool_moves"}) {
		clear(t.ledger)
	}
}

// checkLedger reads again, once the transaction's rows are written, every
// pool a count answered a read of, and fails the transaction when one
// holds more than its capacity.
func (t *Tx) checkLedger() error {
	for name, p := range t.ledgerServed {
		reserved, err := t.StoragePoolReserved(name)
		if err != nil {
			return err
		}
		if reserved > p.CapacityBytes {
			return fmt.Errorf("%w: pool %q holds %d of its %d bytes", ErrReservationsExceed, name, reserved, p.CapacityBytes)
		}
	}
	return nil
}
