// Package failpoint names the points where the commit-point test crashes
// ctrl (test/failpoint; docs/RELIABILITY.md, "Failpoints and the
// commit-point test"): after a command's admission committed, after a
// runner's claim, after each step's commit, between a node's answer and
// its record, and inside a batched registration commit.
//
// Production builds compile Hit to nothing (off.go). A binary built with
// the build tag `failpoint` (on.go) reads its environment at the first
// hit:
//
//	KIBOTOS_FAILPOINT=POINT@KEY#N   SIGKILL this process at the N-th hit of
//	                                POINT about KEY (a command_id)
//	KIBOTOS_FAILPOINT=POINT@-#N     SIGKILL it at the N-th hit of POINT, a
//	                                point without a key, since the process
//	                                started
//	KIBOTOS_FAILPOINT_TRACE=FILE    append every hit to FILE, one line each:
//	                                "POINT KEY" ("POINT KEY crash" for the one
//	                                that kills; KEY "-" for a point without)
//	KIBOTOS_FAILPOINT_LEASE=DURATION the command runner's lease (default 30s),
//	                                so that a crash holding one costs a
//	                                PostgreSQL restart that long, not 30 s
//
// A hit is about KEY when its key is KEY or starts with KEY + "/" (the
// operations of command KEY are KEY/NAME). A point without a key (a
// batched commit serves no one command) counts once this process has had
// a hit about KEY: its n-th hit after that. Armed with the key FromStart,
// such a point counts from the process's start: a batched commit the test
// makes happen for certain (a node's first observation after it connects)
// crashes the process, where one inside a command's run falls there only
// when timing puts it there.
package failpoint

// The environment a failpoint build reads (the package comment).
const (
	EnvCrash = "KIBOTOS_FAILPOINT"
	EnvTrace = "KIBOTOS_FAILPOINT_TRACE"
	EnvLease = "KIBOTOS_FAILPOINT_LEASE"
)

// FromStart is the key that arms a point without a key from the process's
// start (POINT@-#N).
const FromStart = "-"

// The points. Their names are stable: the commit-point test and
// docs/RELIABILITY.md name them.
const (
	// Admitted: an admitting transaction committed (command.Do); the
	// caller has not been answered. Key: the command_id.
	Admitted = "command.admitted"
	// Claimed: a runner's claim of a command committed (its lease
	// taken); the step has not run. Key: the command_id.
	Claimed = "command.claimed"
	// StepCommitted: a step that does not end the command committed
	// (Work.Continue, Work.Wait, a retry after an error). Key: the
	// command_id.
	StepCommitted = "command.step-committed"
	// Ended: the step that ended the command committed (Work.Succeed,
	// Work.Fail). Key: the command_id.
	Ended = "command.ended"
	// AnswerReceived: a node's answer to an operation arrived and is not
	// recorded yet. Key: the operation_id (COMMAND_ID/NAME).
	AnswerReceived = "fleet.answer-received"
	// AnswerRecorded: the answer's record committed, and with it the
	// wake of the command that awaits it; the runner was not kicked yet.
	// Key: the command_id.
	AnswerRecorded = "fleet.answer-recorded"
	// BatchWritten: inside a batched registration commit (observations,
	// clock measurements of every session), its writes made, before its
	// COMMIT. No key.
	BatchWritten = "fleet.batch-written"
	// BatchCommitted: that batch committed; its writers were not told
	// yet. No key.
	BatchCommitted = "fleet.batch-committed"
)

// Points lists every point, in the order a command usually meets them.
var Points = []string{Admitted, Claimed, StepCommitted, AnswerReceived, AnswerRecorded, Ended, BatchWritten, BatchCommitted}

// Keyless are the points without a key, the only ones FromStart arms.
var Keyless = []string{BatchWritten, BatchCommitted}
