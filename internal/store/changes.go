package store

import "sync"

// changes tells waiters in this process that a record was written: a
// Workspace (PutWorkspace), a command (UpdateCommand, by its target) or a
// node registration (PutNode, under nodeChange's key).
// A transaction collects the ids it wrote and they are told once it
// commits, so a waiter never reads a write that may yet roll back.
// Another process's writes are not heard: a waiter polls for those.
type changes struct {
	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
}

// WatchWorkspace returns a channel that is closed (once) after the next
// committed write of Workspace id or of a command on it, and a func that
// stops the watch. Call it before reading what is awaited, so that a
// write between the read and the wait is not missed.
func (s *Store) WatchWorkspace(id string) (<-chan struct{}, func()) {
	return s.watch(id)
}

// watch waits for the next committed write under key (an id written).
func (s *Store) watch(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	c := &s.changes
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiters == nil {
		c.waiters = map[string]map[chan struct{}]struct{}{}
	}
	if c.waiters[id] == nil {
		c.waiters[id] = map[chan struct{}]struct{}{}
	}
	c.waiters[id][ch] = struct{}{}
	return ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.waiters[id][ch]; ok {
			delete(c.waiters[id], ch)
			if len(c.waiters[id]) == 0 {
				delete(c.waiters, id)
			}
		}
	}
}

// WatchNode is WatchWorkspace for the registration of node id: a
// Workspace's view reads its node's session.
func (s *Store) WatchNode(id string) (<-chan struct{}, func()) {
	return s.watch(nodeChange(id))
}

// nodeChange is the key of node id's writes among the ids waited on,
// apart from a command's target of the same name.
func nodeChange(id string) string { return "node:" + id }

// committed tells the waiters of ids.
func (c *changes) committed(ids []string) {
	if len(ids) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		for ch := range c.waiters[id] {
			close(ch)
		}
		delete(c.waiters, id)
	}
}

// wrote notes that the transaction wrote record id.
func (t *Tx) wrote(id string) {
	if id != "" {
		t.written = append(t.written, id)
	}
}
