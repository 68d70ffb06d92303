package ctrl_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/telemetry"
	"github.com/kibotos/kibotos/internal/testenv"
)

// The JSON logs of ctrl and of the node through a CreateWorkspace on a
// real microVM, tracing off: every line about the create (naming its
// Workspace, its instance, its command or one of its node operations)
// carries the create's command_id and the request_id the call answered,
// on both processes; the lines that concern no request name their unit
// of work instead (docs/OBSERVABILITY.md).
func TestCreateWorkspaceLogLinesCarryRequestAndCommandIDs(t *testing.T) {
	ctrlLog, nodeLog := &jsonLog{}, &jsonLog{}
	c := testenv.New(t, testenv.FastFleet(), func(cfg *ctrl.Config) { cfg.Logger = ctrlLog.logger(t) })
	c.BootableCatalog(t)
	n := c.StartNodeWith(t, "node-a", "", func(cfg *node.Config) { cfg.Logger = nodeLog.logger(t) },
		node.Pool{Name: "default", Dir: t.TempDir(), Default: true})
	t.Cleanup(n.PowerOff)
	c.EnsureCapacity(t, "default", testenv.DefaultPoolCapacity)

	const commandID = "logged-create"
	created := c.CreateSmall(t, commandID)
	requestID := created.Header().Get(telemetry.HeaderRequestID)
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	waitAvailable(t, c, id)
	// The command's last line is logged once its end committed, which
	// the Workspace's state shows a moment before.
	testenv.WaitFor(t, "the create's command succeeded line", func() bool {
		return ctrlLog.has(func(l logLine) bool { return l["msg"] == "command succeeded" && l["command_id"] == commandID })
	})

	seen := map[string]bool{}
	for _, p := range []struct {
		name  string
		lines []logLine
	}{{"ctrl", ctrlLog.lines(t)}, {"node", nodeLog.lines(t)}} {
		for _, l := range p.lines {
			if !l.names(id, commandID) {
				checkUnitOfWork(t, p.name, l)
				continue
			}
			if observation[l["msg"].(string)] {
				// The execution's own observation, not the command's.
				if l["instance_id"] == nil || l["node_id"] == nil {
					t.Errorf("%s: observation line without instance_id and node_id: %v", p.name, l)
				}
				continue
			}
			seen[p.name+": "+l["msg"].(string)] = true
			if l["command_id"] != commandID || l["request_id"] != requestID {
				t.Errorf("%s: a line about the create without command_id %s and request_id %s: %v", p.name, commandID, requestID, l)
			}
		}
	}
	// The lines the test counts on exist: admission (in the request), the
	// runner's end of the command, the node's start of the execution.
	for _, want := range []string{"ctrl: command admitted", "ctrl: command succeeded", "node: operation applied", "node: execution running"} {
		if !seen[want] {
			t.Errorf("no line %q about the create; saw %v", want, seen)
		}
	}
}

// observation are the lines of an execution's own observation: they name
// its instance (and node), not the command that started it.
var observation = map[string]bool{"guest probe": true}

// processLines concern the process as a whole: its start and its end.
var processLines = map[string]bool{"database": true, "listening": true, "node agent starting": true, "node agent stopped": true, "accelerator chosen": true}

var hexID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// checkUnitOfWork asserts the rule for lines about no command: a line in
// a request carries its request_id; the others name what they concern (a
// node, a sweep) unless they concern the whole process.
func checkUnitOfWork(t *testing.T, process string, l logLine) {
	t.Helper()
	if id, ok := l["request_id"].(string); ok && !hexID.MatchString(id) {
		t.Errorf("%s: request_id %q is not 32 hex digits: %v", process, id, l)
	}
	switch {
	case l["request_id"] != nil, l["node_id"] != nil, l["sweep"] != nil, processLines[l["msg"].(string)]:
	case process == "ctrl" && l["msg"] == "command admitted":
		t.Errorf("ctrl: an admission without its request_id: %v", l)
	default:
		t.Errorf("%s: a line naming no request, command, node or sweep: %v", process, l)
	}
}

// jsonLog collects the JSON lines of one process's logger.
type jsonLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (j *jsonLog) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.buf.Write(p)
}

func (j *jsonLog) logger(t *testing.T) *slog.Logger {
	t.Helper()
	log, err := telemetry.NewLogger(j, telemetry.LogJSON)
	if err != nil {
		t.Fatal(err)
	}
	return log
}

type logLine map[string]any

// names reports whether l names the Workspace id or the command id in any
// of its values: the instance id starts with the Workspace's, an
// operation id with its command's.
func (l logLine) names(ids ...string) bool {
	for k, v := range l {
		s, ok := v.(string)
		if !ok || k == "msg" {
			continue
		}
		for _, id := range ids {
			if strings.Contains(s, id) {
				return true
			}
		}
	}
	return false
}

// lines are the lines logged so far; a line that is not one JSON object
// fails the test.
func (j *jsonLog) lines(t *testing.T) []logLine {
	t.Helper()
	out, err := j.parse()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (j *jsonLog) has(match func(logLine) bool) bool {
	lines, _ := j.parse()
	return slices.ContainsFunc(lines, match)
}

func (j *jsonLog) parse() ([]logLine, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []logLine
	for _, raw := range bytes.Split(bytes.TrimSpace(j.buf.Bytes()), []byte("\n")) {
		var l logLine
		if err := json.Unmarshal(raw, &l); err != nil {
			return out, fmt.Errorf("not a JSON line: %q: %w", raw, err)
		}
		out = append(out, l)
	}
	return out, nil
}
