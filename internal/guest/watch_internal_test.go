package guest

import (
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

// A read that ends between a move's IN_MOVED_FROM and its IN_MOVED_TO
// (the kernel queues them one after the other) holds the first back for
// the next read, which pairs them; one whose IN_MOVED_TO never comes is
// translated alone (a move out of the watch).
func TestAMoveSplitAcrossReadsIsPaired(t *testing.T) {
	created := rawEvent{wd: 1, mask: unix.IN_CREATE, name: "a"}
	from := rawEvent{wd: 1, mask: unix.IN_MOVED_FROM, cookie: 7, name: "old"}
	to := rawEvent{wd: 1, mask: unix.IN_MOVED_TO, cookie: 7, name: "new"}
	var m movePairs
	if got := m.next([]rawEvent{created, from}); !reflect.DeepEqual(got, []rawEvent{created}) || !m.waiting() {
		t.Fatalf("a read ending with IN_MOVED_FROM: translated %v, waiting %v; want the rest, and to wait", got, m.waiting())
	}
	if got := m.next([]rawEvent{to}); !reflect.DeepEqual(got, []rawEvent{from, to}) || m.waiting() {
		t.Errorf("the next read: translated %v, waiting %v; want the pair together", got, m.waiting())
	}
	m.next([]rawEvent{from})
	if got := m.flush(); !reflect.DeepEqual(got, []rawEvent{from}) || m.waiting() {
		t.Errorf("no IN_MOVED_TO came: flushed %v, waiting %v", got, m.waiting())
	}
	if got := m.next([]rawEvent{from, to, created}); !reflect.DeepEqual(got, []rawEvent{from, to, created}) || m.waiting() {
		t.Errorf("a pair within one read: translated %v, waiting %v", got, m.waiting())
	}
}
