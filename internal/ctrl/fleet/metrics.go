package fleet

// LiveSessions is how many node control sessions this replica holds now:
// the kibotos_node_sessions_live gauge, read at each scrape. A session
// counts from the moment it is attached (its node authenticated and
// registered) until it is detached, whichever side ended it.
func (f *Fleet) LiveSessions() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sessions)
}
