package cli_test

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/cli"
)

const readSize = 64 << 10 // what one read of exec's input asks for

// countingReader is a bytes.Reader that says how many reads it answered.
type countingReader struct {
	*bytes.Reader
	mu    sync.Mutex
	reads int
	read  chan struct{} // a value after each read
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	r.mu.Lock()
	r.reads++
	r.mu.Unlock()
	select {
	case r.read <- struct{}{}:
	default:
	}
	return n, err
}

func (r *countingReader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads
}

// inputProcesses is a ProcessService whose one process takes stdin to
// its close and exits. Its first SendProcessInput holds until the input
// has been read as far ahead as exec reads it (a MiB past that call), so
// the next call shows how much exec joins into one.
type inputProcesses struct {
	ctrlv1connect.UnimplementedProcessServiceHandler
	in     *countingReader
	mu     sync.Mutex
	sends  []*ctrlv1.SendProcessInputRequest
	closed chan struct{}
}

func (p *inputProcesses) ExecProcess(ctx context.Context, _ *connect.Request[ctrlv1.ExecProcessRequest], s *connect.ServerStream[ctrlv1.ExecProcessResponse]) error {
	if err := s.Send(&ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Started{Started: &ctrlv1.ProcessStarted{ProcessId: "proc-1"}}}); err != nil {
		return err
	}
	select {
	case <-p.closed:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Send(&ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Exit{Exit: &ctrlv1.ProcessExitStatus{}}})
}

func (p *inputProcesses) SendProcessInput(ctx context.Context, req *connect.Request[ctrlv1.SendProcessInputRequest]) (*connect.Response[ctrlv1.SendProcessInputResponse], error) {
	p.mu.Lock()
	p.sends = append(p.sends, req.Msg)
	first := len(p.sends) == 1
	p.mu.Unlock()
	if first {
		// Read ahead: what this call took, a MiB queued, and one more read
		// waiting for room. A CLI that reads nothing during a call never
		// gets there: the test then fails on the next call's size.
		giveUp := time.After(10 * time.Second)
		for want := len(req.Msg.GetData())/readSize + (1<<20)/readSize + 1; p.in.count() < want; {
			select {
			case <-p.in.read:
			case <-giveUp:
				want = 0
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	if req.Msg.GetClose() {
		close(p.closed)
	}
	return connect.NewResponse(&ctrlv1.SendProcessInputResponse{}), nil
}

// exec -i sends what it read while a SendProcessInput was under way in
// the next one (at most 1 MiB, the call's bound), each at its offset,
// the input whole and in order, closing it with the last.
func TestExecJoinsTheInputReadDuringACallIntoTheNext(t *testing.T) {
	input := make([]byte, 3<<20+12345)
	for i := range input {
		input[i] = byte(i * 7)
	}
	p := &inputProcesses{in: &countingReader{Reader: bytes.NewReader(input), read: make(chan struct{}, 1)}, closed: make(chan struct{})}
	onFakeEndpoint(t, func(m *http.ServeMux) { m.Handle(ctrlv1connect.NewProcessServiceHandler(p)) })

	root := cli.NewRootCommand()
	root.SetArgs([]string{"workspace", "exec", "-i", "ws-1", "--", "cat"})
	root.SetIn(p.in)
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("exec -i: %v: %s", err, stderr.String())
	}

	var got []byte
	for i, s := range p.sends {
		if s.GetOffset() != uint64(len(got)) || len(s.GetData()) > 1<<20 || s.GetClose() != (i == len(p.sends)-1) {
			t.Errorf("call %d: offset %d, %d bytes, close %v; want offset %d, at most 1 MiB, close only on the last", i, s.GetOffset(), len(s.GetData()), s.GetClose(), len(got))
		}
		got = append(got, s.GetData()...)
	}
	if !bytes.Equal(got, input) {
		t.Fatalf("the process got %d bytes that differ from the %d given", len(got), len(input))
	}
	if len(p.sends) < 2 {
		t.Fatalf("%d calls, want the input in several", len(p.sends))
	}
	if n := len(p.sends[1].GetData()); n != 1<<20 {
		t.Errorf("the second call carried %d bytes, want the MiB read during the first", n)
	}
}
