package command

import "sync"

// gatherer gathers what arrives to be done together, in one transaction
// (Work.SucceedTogether, Runner.DoTogether): the batch forming takes
// every T that arrives until it is sealed, as its transaction begins, or
// until it holds max; what arrives next forms the next batch.
type gatherer[T any] struct {
	max     int
	mu      sync.Mutex
	forming *batch[T]
}

// batch is what one transaction does together.
type batch[T any] struct {
	items []T
}

// join adds x to the batch forming, and answers the batch when x begins
// it: its caller then runs it.
func (g *gatherer[T]) join(x T) *batch[T] {
	g.mu.Lock()
	defer g.mu.Unlock()
	var lead *batch[T]
	if g.forming == nil {
		g.forming = &batch[T]{}
		lead = g.forming
	}
	g.forming.items = append(g.forming.items, x)
	if len(g.forming.items) >= g.max {
		g.forming = nil
	}
	return lead
}

// run joins x to the batch forming and, when x begins it, runs the batch
// (do) and tells every member its outcome. The batch is sealed again once
// do returned: do seals it as its transaction begins, but a transaction
// that could not begin never did, and a member that joined meanwhile
// would wait for ever.
func (g *gatherer[T]) run(x T, do func(*batch[T]) error, tell func(T, error)) {
	b := g.join(x)
	if b == nil {
		return
	}
	err := do(b)
	for _, o := range g.seal(b) {
		tell(o, err)
	}
}

// seal ends b's forming: what arrives from now on forms another.
func (g *gatherer[T]) seal(b *batch[T]) []T {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.forming == b {
		g.forming = nil
	}
	return b.items
}
