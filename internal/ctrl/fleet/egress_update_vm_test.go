package fleet_test

import (
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// updateDrain is the test's UpdateEgress drain_seconds: long enough for a
// few guest commands under TCG while the old connection is judged.
const updateDrain = 40

// An UpdateEgress reaches a running guest: the Egress's endpoint moves to
// a second SOCKS5 proxy. A connection open through the first keeps
// carrying bytes during the call's drain_seconds, with the status's
// draining_revision at the old revision, and is reset after it; a new
// connection goes through the second proxy once applied_revision is the
// new revision; draining_revision is 0 once the old connection is gone.
func TestAnEgressUpdateReachesTheRunningGuest(t *testing.T) {
	e := newVMEnv(t)
	firstAt, secondAt := netip.MustParseAddrPort("8.8.8.8:1080"), netip.MustParseAddrPort("8.8.8.9:1080")
	private := netip.MustParseAddr("10.1.2.3")
	inet := newInternet(t, firstAt.Addr(), secondAt.Addr(), private)
	first, second := startSOCKS5(t, inet.Internet, firstAt), startSOCKS5(t, inet.Internet, secondAt)
	accepted := new(atomic.Int32)
	go serveEcho(inet.Listen(t, "tcp", netip.AddrPortFrom(private, 80).String()), accepted)
	e.startInternetNode(inet)

	spec := &ctrlv1.EgressSpec{Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: firstAt.String(), Username: "caller", Password: "s3cret"}
	eg, err := e.c.Egresses.CreateEgress(ctx, connect.NewRequest(&ctrlv1.CreateEgressRequest{Command: cmd("egress-moving"), Spec: spec}))
	if err != nil {
		t.Fatal(err)
	}
	egressID := eg.Msg.GetEgress().GetEgressId()
	req := createRequest("create-egress-moving")
	req.Spec.NetworkPolicy = &ctrlv1.NetworkPolicy{
		Mode:     ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET,
		Egresses: []*ctrlv1.NetworkPolicyEgress{{EgressId: egressID, Destinations: []string{"10.1.2.3/32"}}},
	}
	created, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)

	// A connection that stays open and carries a line a second: nc reads
	// a FIFO a writing loop holds open and writes the echoes to a file.
	long := "setsid sh -c 'mkfifo /tmp/f; (while true; do echo tick; sleep 1; done > /tmp/f &); nc 10.1.2.3 80 < /tmp/f > /tmp/ticks; echo closed > /tmp/nc-done' </dev/null >/dev/null 2>&1 &"
	if out, code := e.c.Exec(t, id, "sh", "-c", long); code != 0 {
		t.Fatalf("the long connection: exit %d %q", code, out)
	}
	ticks := func() int {
		out, _ := e.c.Exec(t, id, "sh", "-c", "wc -l < /tmp/ticks")
		n, _ := strconv.Atoi(strings.TrimSpace(out))
		return n
	}
	waitLong(t, "the long connection carrying bytes", func() bool { return ticks() >= 2 })
	if first.Load() != 1 {
		t.Fatalf("the first proxy made %d connections, want 1", first.Load())
	}

	spec.Endpoint = secondAt.String()
	updatedAt := time.Now()
	if _, err := e.c.Egresses.UpdateEgress(ctx, connect.NewRequest(&ctrlv1.UpdateEgressRequest{
		Command: cmd("move-egress"), EgressId: egressID, ExpectedRevision: 1, Spec: spec, DrainSeconds: updateDrain,
	})); err != nil {
		t.Fatal(err)
	}
	var st *ctrlv1.NetworkPolicyStatus
	waitLong(t, "revision 2 of the Egress confirmed", func() bool {
		st = e.workspace(id).GetNetworkPolicyStatus()
		return len(st.GetEgresses()) == 1 && st.GetEgresses()[0].GetAppliedRevision() == 2
	})
	if st.GetEgresses()[0].GetDrainingRevision() != 1 || st.GetAppliedRevision() != 1 || st.GetDrainingRevision() != 0 {
		t.Errorf("the status right after the update: %v, want policy revision 1 with nothing of it draining, the Egress draining revision 1 (the long connection)", st)
	}
	before := ticks()
	if out, code := e.c.Exec(t, id, "sh", "-c", "echo moved | nc -w 10 10.1.2.3 80"); code != 0 || out != "moved\n" {
		t.Errorf("a new connection after the update: exit %d %q", code, out)
	}
	if first.Load() != 1 || second.Load() != 1 {
		t.Errorf("proxy connections: first %d, second %d; want the new connection through the second", first.Load(), second.Load())
	}
	waitLong(t, "the old connection carrying bytes during the drain", func() bool { return ticks() > before })
	if out, _ := e.c.Exec(t, id, "cat", "/tmp/nc-done"); strings.Contains(out, "closed") {
		t.Error("the old connection closed during its drain")
	}
	if elapsed := time.Since(updatedAt); elapsed >= updateDrain*time.Second {
		t.Fatalf("the checks during the drain took %v, longer than the drain: the machine is too slow to judge it", elapsed)
	}

	waitLong(t, "the old connection reset", func() bool {
		out, _ := e.c.Exec(t, id, "cat", "/tmp/nc-done")
		return strings.Contains(out, "closed")
	})
	if elapsed := time.Since(updatedAt); elapsed < updateDrain*time.Second {
		t.Errorf("the old connection was reset %v after the update, before its %d s drain", elapsed, updateDrain)
	}
	waitLong(t, "the Egress's drain over in the status", func() bool {
		st := e.workspace(id).GetNetworkPolicyStatus()
		return len(st.GetEgresses()) == 1 && st.GetEgresses()[0].GetDrainingRevision() == 0 && st.GetEgresses()[0].GetAppliedRevision() == 2
	})
}
