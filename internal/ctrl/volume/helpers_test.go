package volume_test

import "time"

// sleep is the poll interval of waitFor, which waits on a stored state.
func sleep() { time.Sleep(5 * time.Millisecond) }
