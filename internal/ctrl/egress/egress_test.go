package egress_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/egress"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/volume"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

var ctx = context.Background()

type env struct {
	store *store.Store
	eg    *egress.Service
	ws    *workspace.Service
}

// newEnv is the Egress domain and the Workspace domain on a real database,
// with a ready template and a registered (not connected) node, so
// Workspaces are admitted but no node acts.
func newEnv(t *testing.T, b storetest.Backend) *env {
	t.Helper()
	st := storetest.Open(t, b.DSN(t))
	runner := command.NewRunner(st, "test", slog.Default())
	f := fleet.New(st, runner, slog.Default(), fleet.DefaultConfig, fleet.Deps{})
	storetest.PutNodeWithPool(t, st, "node-a", "pool-a")
	storetest.PutReadyTemplate(t, st, "busybox", "1", true)
	vols := volume.New(st, f, runner, volume.DefaultProfile)
	return &env{store: st, eg: egress.New(st, runner), ws: workspace.New(st, f, vols, runner)}
}

func sqlite(t *testing.T) *env {
	return newEnv(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
}

func forEachBackend(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, newEnv(t, b)) })
	}
}

func cmd(id string) *ctrlv1.CommandMetadata { return &ctrlv1.CommandMetadata{CommandId: id} }

func socks(udp bool) *ctrlv1.EgressSpec {
	return &ctrlv1.EgressSpec{Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: "proxy.example:1080",
		Username: "alice", Password: "hunter2", UdpEnabled: udp}
}

func udpResolver() *ctrlv1.ResolverSpec {
	return &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP, Address: "10.1.2.3:53"}
}

func (e *env) createEgress(t *testing.T, id string, spec *ctrlv1.EgressSpec, l map[string]string) *ctrlv1.Egress {
	t.Helper()
	res, err := e.eg.CreateEgress(ctx, &ctrlv1.CreateEgressRequest{Command: cmd(id), Spec: spec, Labels: l})
	if err != nil {
		t.Fatalf("CreateEgress %s: %v", id, err)
	}
	return res.GetEgress()
}

func (e *env) createResolver(t *testing.T, id string, spec *ctrlv1.ResolverSpec, l map[string]string) *ctrlv1.Resolver {
	t.Helper()
	res, err := e.eg.CreateResolver(ctx, &ctrlv1.CreateResolverRequest{Command: cmd(id), Spec: spec, Labels: l})
	if err != nil {
		t.Fatalf("CreateResolver %s: %v", id, err)
	}
	return res.GetResolver()
}

// policy forwards 198.51.100.0/24 through egressID and, when resolverID is
// set, the guest's DNS to it through egressID too (or directly).
func policy(egressID, resolverID string, direct bool) *ctrlv1.NetworkPolicy {
	p := &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET}
	if egressID != "" {
		p.Egresses = []*ctrlv1.NetworkPolicyEgress{{EgressId: egressID, Destinations: []string{"198.51.100.0/24"}}}
	}
	if resolverID != "" {
		path := &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_EgressId{EgressId: egressID}}
		if direct {
			path.Kind = &ctrlv1.ResolverPath_Direct{Direct: &ctrlv1.ResolverDirectPath{}}
		}
		p.Resolvers = []*ctrlv1.NetworkPolicyResolver{{ResolverId: resolverID, Path: path}}
	}
	return p
}

func (e *env) createWorkspace(id string, p *ctrlv1.NetworkPolicy) (*ctrlv1.Workspace, error) {
	res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd(id), Spec: &ctrlv1.WorkspaceCreateSpec{
		Resources: &ctrlv1.ResourceRequest{MemoryBytes: 256 << 20}, NetworkPolicy: p,
	}})
	return res.GetWorkspace(), err
}

func wantCode(t *testing.T, what string, err error, code connect.Code, field string) {
	t.Helper()
	if connect.CodeOf(err) != code || apierr.FieldOf(err) != field {
		t.Errorf("%s: err = %v (field %q), want %v naming %q", what, err, apierr.FieldOf(err), code, field)
	}
}

// workspaceIDs is ErrorDetail.workspace_ids of err.
func workspaceIDs(err error) []string {
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return nil
	}
	for _, d := range cerr.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*ctrlv1.ErrorDetail); ok {
				return ed.GetWorkspaceIds()
			}
		}
	}
	return nil
}

func TestEgressSpecValidation(t *testing.T) {
	e := sqlite(t)
	with := func(fn func(s *ctrlv1.EgressSpec)) *ctrlv1.EgressSpec {
		s := socks(false)
		fn(s)
		return s
	}
	for i, tc := range []struct {
		name  string
		spec  *ctrlv1.EgressSpec
		field string
	}{
		{"no spec", nil, "spec"},
		{"no protocol", with(func(s *ctrlv1.EgressSpec) { s.Protocol = 0 }), "spec.protocol"},
		{"unknown protocol", with(func(s *ctrlv1.EgressSpec) { s.Protocol = 9 }), "spec.protocol"},
		{"no endpoint", with(func(s *ctrlv1.EgressSpec) { s.Endpoint = "" }), "spec.endpoint"},
		{"endpoint without port", with(func(s *ctrlv1.EgressSpec) { s.Endpoint = "proxy.example" }), "spec.endpoint"},
		{"port 0", with(func(s *ctrlv1.EgressSpec) { s.Endpoint = "proxy.example:0" }), "spec.endpoint"},
		{"port 65536", with(func(s *ctrlv1.EgressSpec) { s.Endpoint = "proxy.example:65536" }), "spec.endpoint"},
		{"named port", with(func(s *ctrlv1.EgressSpec) { s.Endpoint = "proxy.example:socks" }), "spec.endpoint"},
		{"bad host", with(func(s *ctrlv1.EgressSpec) { s.Endpoint = "pro_xy.example:1080" }), "spec.endpoint"},
		{"unbracketed IPv6", with(func(s *ctrlv1.EgressSpec) { s.Endpoint = "2001:db8::1:1080" }), "spec.endpoint"},
		{"zoned IPv6", with(func(s *ctrlv1.EgressSpec) { s.Endpoint = "[fe80::1%eth0]:1080" }), "spec.endpoint"},
		{"long host", with(func(s *ctrlv1.EgressSpec) { s.Endpoint = strings.Repeat("a.", 127) + "aa:1080" }), "spec.endpoint"},
		{"server_name without tls", with(func(s *ctrlv1.EgressSpec) { s.ServerName = "proxy.example" }), "spec.server_name"},
		{"bad server_name", with(func(s *ctrlv1.EgressSpec) { s.Tls, s.ServerName = true, "-bad-.example" }), "spec.server_name"},
		{"long username", with(func(s *ctrlv1.EgressSpec) { s.Username = strings.Repeat("u", 256) }), "spec.username"},
		{"long password", with(func(s *ctrlv1.EgressSpec) { s.Password = strings.Repeat("p", 256) }), "spec.password"},
		{"control character", with(func(s *ctrlv1.EgressSpec) { s.Password = "a\r\nb" }), "spec.password"},
		{"password without username", with(func(s *ctrlv1.EgressSpec) { s.Username = "" }), "spec.password"},
		{"colon in an HTTP username", with(func(s *ctrlv1.EgressSpec) {
			s.Protocol, s.Username = ctrlv1.EgressProtocol_EGRESS_PROTOCOL_HTTP_CONNECT, "a:b"
		}), "spec.username"},
		{"udp over HTTP_CONNECT", with(func(s *ctrlv1.EgressSpec) {
			s.Protocol, s.UdpEnabled = ctrlv1.EgressProtocol_EGRESS_PROTOCOL_HTTP_CONNECT, true
		}), "spec.udp_enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.eg.CreateEgress(ctx, &ctrlv1.CreateEgressRequest{Command: cmd(fmt.Sprintf("c-%d", i)), Spec: tc.spec})
			wantCode(t, "CreateEgress", err, connect.CodeInvalidArgument, tc.field)
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error quotes the password: %v", err)
			}
		})
	}
	_, err := e.eg.CreateEgress(ctx, &ctrlv1.CreateEgressRequest{Command: cmd("c-labels"), Spec: socks(false), Labels: map[string]string{"a": "has space"}})
	wantCode(t, "bad label", err, connect.CodeInvalidArgument, `labels["a"]`)
	_, err = e.eg.CreateEgress(ctx, &ctrlv1.CreateEgressRequest{Spec: socks(false)})
	wantCode(t, "no command id", err, connect.CodeInvalidArgument, "command.command_id")
	for i, ok := range []*ctrlv1.EgressSpec{
		with(func(s *ctrlv1.EgressSpec) {
			s.Endpoint, s.Tls, s.ServerName = "[2001:db8::1]:443", true, "proxy.example"
		}),
		with(func(s *ctrlv1.EgressSpec) {
			s.Protocol, s.Username, s.Password = ctrlv1.EgressProtocol_EGRESS_PROTOCOL_HTTP_CONNECT, "", ""
		}),
	} {
		if _, err := e.eg.CreateEgress(ctx, &ctrlv1.CreateEgressRequest{Command: cmd(fmt.Sprintf("ok-%d", i)), Spec: ok}); err != nil {
			t.Errorf("valid spec %v: %v", ok, err)
		}
	}
}

func TestResolverSpecValidation(t *testing.T) {
	e := sqlite(t)
	https := ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_HTTPS
	tls := ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TLS
	for i, tc := range []struct {
		name  string
		spec  *ctrlv1.ResolverSpec
		field string
	}{
		{"no spec", nil, "spec"},
		{"no protocol", &ctrlv1.ResolverSpec{Address: "192.0.2.1:53"}, "spec.protocol"},
		{"unknown protocol", &ctrlv1.ResolverSpec{Protocol: 7, Address: "192.0.2.1:53"}, "spec.protocol"},
		{"udp without address", &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP}, "spec.address"},
		{"address without port", &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP, Address: "192.0.2.1"}, "spec.address"},
		{"url on tls", &ctrlv1.ResolverSpec{Protocol: tls, Address: "192.0.2.1:853", Url: "https://dns.example/dns-query"}, "spec.url"},
		{"server_name on udp", &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP, Address: "192.0.2.1:53", ServerName: "dns.example"}, "spec.server_name"},
		{"https without url", &ctrlv1.ResolverSpec{Protocol: https}, "spec.url"},
		{"https with address", &ctrlv1.ResolverSpec{Protocol: https, Address: "192.0.2.1:443", Url: "https://dns.example/dns-query"}, "spec.address"},
		{"http url", &ctrlv1.ResolverSpec{Protocol: https, Url: "http://dns.example/dns-query"}, "spec.url"},
		{"user in url", &ctrlv1.ResolverSpec{Protocol: https, Url: "https://u:p@dns.example/dns-query"}, "spec.url"},
		{"fragment", &ctrlv1.ResolverSpec{Protocol: https, Url: "https://dns.example/dns-query#x"}, "spec.url"},
		{"bad url port", &ctrlv1.ResolverSpec{Protocol: https, Url: "https://dns.example:0/dns-query"}, "spec.url"},
		{"long url", &ctrlv1.ResolverSpec{Protocol: https, Url: "https://dns.example/" + strings.Repeat("q", 2048)}, "spec.url"},
		{"bad server_name", &ctrlv1.ResolverSpec{Protocol: tls, Address: "192.0.2.1:853", ServerName: "a..b"}, "spec.server_name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.eg.CreateResolver(ctx, &ctrlv1.CreateResolverRequest{Command: cmd(fmt.Sprintf("c-%d", i)), Spec: tc.spec})
			wantCode(t, "CreateResolver", err, connect.CodeInvalidArgument, tc.field)
		})
	}
	for i, ok := range []*ctrlv1.ResolverSpec{
		{Protocol: https, Url: "https://dns.example/dns-query", ServerName: "dns.example"},
		{Protocol: tls, Address: "[2001:db8::53]:853"},
		{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP, Address: "dns.example:53"},
	} {
		if _, err := e.eg.CreateResolver(ctx, &ctrlv1.CreateResolverRequest{Command: cmd(fmt.Sprintf("ok-%d", i)), Spec: ok}); err != nil {
			t.Errorf("valid spec %v: %v", ok, err)
		}
	}
}

// The password is stored for the nodes and never answered: not by create,
// get, list, update, delete or a replay; password_set says it is there.
func TestPasswordIsWriteOnly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		created := e.createEgress(t, "c1", socks(false), nil)
		replay := e.createEgress(t, "c1", socks(false), nil)
		got, err := e.eg.GetEgress(ctx, &ctrlv1.GetEgressRequest{EgressId: created.GetEgressId()})
		if err != nil {
			t.Fatal(err)
		}
		listed, err := e.eg.ListEgresses(ctx, &ctrlv1.ListEgressesRequest{})
		if err != nil || len(listed.GetEgresses()) != 1 {
			t.Fatalf("ListEgresses = %v, %v", listed, err)
		}
		next := socks(false)
		next.Password = "correct horse"
		updated, err := e.eg.UpdateEgress(ctx, &ctrlv1.UpdateEgressRequest{Command: cmd("u1"), EgressId: created.GetEgressId(), ExpectedRevision: 1, Spec: next})
		if err != nil {
			t.Fatal(err)
		}
		deleted, err := e.eg.DeleteEgress(ctx, &ctrlv1.DeleteEgressRequest{Command: cmd("d1"), EgressId: created.GetEgressId()})
		if err != nil {
			t.Fatal(err)
		}
		for name, eg := range map[string]*ctrlv1.Egress{
			"create": created, "replay": replay, "get": got.GetEgress(), "list": listed.GetEgresses()[0],
			"update": updated.GetEgress(), "delete": deleted.GetEgress(),
		} {
			if eg.GetSpec().GetPassword() != "" || !eg.GetPasswordSet() || eg.GetSpec().GetUsername() != "alice" {
				t.Errorf("%s answered password %q, password_set %t, username %q; want none, true, alice",
					name, eg.GetSpec().GetPassword(), eg.GetPasswordSet(), eg.GetSpec().GetUsername())
			}
		}
		var stored *store.EgressRecord
		if err := e.store.Tx(ctx, func(tx *store.Tx) error {
			stored, err = tx.GetEgress(created.GetEgressId(), false)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if stored.Egress.GetSpec().GetPassword() != "correct horse" {
			t.Errorf("stored password %q, want the updated one kept for the nodes", stored.Egress.GetSpec().GetPassword())
		}
		// Nor does the command record keep it.
		if err := e.store.Tx(ctx, func(tx *store.Tx) error {
			for _, id := range []string{"c1", "u1"} {
				row, err := tx.GetCommand(id, false)
				if err != nil {
					return err
				}
				if raw := string(row.GetRequest().GetValue()); strings.Contains(raw, "hunter2") || strings.Contains(raw, "correct horse") {
					t.Errorf("command %s records the password", id)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		none := e.createEgress(t, "c2", &ctrlv1.EgressSpec{Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: "192.0.2.9:1080"}, nil)
		if none.GetPasswordSet() {
			t.Error("password_set without a password")
		}
	})
}

func TestCreateReplaysAndRefusesOtherInput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		first := e.createEgress(t, "c1", socks(false), map[string]string{"team": "a"})
		if first.GetRevision() != 1 || first.GetDeleted() || first.GetCreatedAt() == nil || !first.GetCreatedAt().AsTime().Equal(first.GetUpdatedAt().AsTime()) {
			t.Errorf("created %v, want revision 1, created_at = updated_at", first)
		}
		again := e.createEgress(t, "c1", socks(false), map[string]string{"team": "a"})
		if !proto.Equal(first, again) {
			t.Errorf("replay answered %v, want %v", again, first)
		}
		other := socks(false)
		other.Password = "other"
		_, err := e.eg.CreateEgress(ctx, &ctrlv1.CreateEgressRequest{Command: cmd("c1"), Spec: other, Labels: map[string]string{"team": "a"}})
		wantCode(t, "same command, other password", err, connect.CodeAlreadyExists, "command.command_id")
		r := e.createResolver(t, "r1", udpResolver(), nil)
		if r2 := e.createResolver(t, "r1", udpResolver(), nil); !proto.Equal(r, r2) {
			t.Errorf("resolver replay answered %v, want %v", r2, r)
		}
		_, err = e.eg.CreateResolver(ctx, &ctrlv1.CreateResolverRequest{Command: cmd("r1"), Spec: &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP, Address: "10.1.2.3:53"}})
		wantCode(t, "same resolver command, other input", err, connect.CodeAlreadyExists, "command.command_id")
		// A command id is one command, whatever the kind.
		_, err = e.eg.DeleteEgress(ctx, &ctrlv1.DeleteEgressRequest{Command: cmd("r1"), EgressId: first.GetEgressId()})
		wantCode(t, "resolver's command id on a delete", err, connect.CodeAlreadyExists, "command.command_id")
	})
}

func TestGetUnknownIsNotFound(t *testing.T) {
	e := sqlite(t)
	_, err := e.eg.GetEgress(ctx, &ctrlv1.GetEgressRequest{EgressId: "egr-none"})
	wantCode(t, "GetEgress", err, connect.CodeNotFound, "")
	_, err = e.eg.GetResolver(ctx, &ctrlv1.GetResolverRequest{ResolverId: "rsv-none"})
	wantCode(t, "GetResolver", err, connect.CodeNotFound, "")
	_, err = e.eg.UpdateResolver(ctx, &ctrlv1.UpdateResolverRequest{Command: cmd("u"), ResolverId: "rsv-none", ExpectedRevision: 1, Spec: udpResolver()})
	wantCode(t, "UpdateResolver", err, connect.CodeNotFound, "")
	_, err = e.eg.DeleteEgress(ctx, &ctrlv1.DeleteEgressRequest{Command: cmd("d"), EgressId: "egr-none"})
	wantCode(t, "DeleteEgress", err, connect.CodeNotFound, "")
}

// Lists page by id under a label selector, with tokens bound to it, and
// leave deleted records out.
func TestListsSelectAndPage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		var want []string
		for i := range 5 {
			team := map[string]string{"team": []string{"a", "b"}[i%2]}
			eg := e.createEgress(t, fmt.Sprintf("e%d", i), socks(false), team)
			r := e.createResolver(t, fmt.Sprintf("r%d", i), udpResolver(), team)
			if team["team"] == "a" {
				want = append(want, eg.GetEgressId()+"/"+r.GetResolverId())
			}
		}
		var egs, rsvs []string
		token := ""
		for {
			res, err := e.eg.ListEgresses(ctx, &ctrlv1.ListEgressesRequest{LabelSelector: "team=a", PageSize: 2, PageToken: token})
			if err != nil {
				t.Fatal(err)
			}
			for _, eg := range res.GetEgresses() {
				egs = append(egs, eg.GetEgressId())
			}
			if token = res.GetNextPageToken(); token == "" {
				break
			}
		}
		for {
			res, err := e.eg.ListResolvers(ctx, &ctrlv1.ListResolversRequest{LabelSelector: "team=a", PageSize: 1, PageToken: token})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res.GetResolvers() {
				rsvs = append(rsvs, r.GetResolverId())
			}
			if token = res.GetNextPageToken(); token == "" {
				break
			}
		}
		if len(egs) != 3 || len(rsvs) != 3 || !slices.IsSorted(egs) || !slices.IsSorted(rsvs) {
			t.Fatalf("team=a pages: egresses %v, resolvers %v; want three of each in id order", egs, rsvs)
		}
		for _, w := range want {
			eid, rid, _ := strings.Cut(w, "/")
			if !slices.Contains(egs, eid) || !slices.Contains(rsvs, rid) {
				t.Errorf("%s missing from %v / %v", w, egs, rsvs)
			}
		}
		first, err := e.eg.ListEgresses(ctx, &ctrlv1.ListEgressesRequest{LabelSelector: "team=a", PageSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.eg.ListEgresses(ctx, &ctrlv1.ListEgressesRequest{LabelSelector: "team=b", PageToken: first.GetNextPageToken()})
		wantCode(t, "token of another selector", err, connect.CodeInvalidArgument, "page_token")
		_, err = e.eg.ListResolvers(ctx, &ctrlv1.ListResolversRequest{LabelSelector: "=bad"})
		wantCode(t, "bad selector", err, connect.CodeInvalidArgument, "label_selector")
		if _, err := e.eg.DeleteEgress(ctx, &ctrlv1.DeleteEgressRequest{Command: cmd("d"), EgressId: egs[0]}); err != nil {
			t.Fatal(err)
		}
		res, err := e.eg.ListEgresses(ctx, &ctrlv1.ListEgressesRequest{LabelSelector: "team=a"})
		if err != nil || len(res.GetEgresses()) != 2 || slices.ContainsFunc(res.GetEgresses(), func(eg *ctrlv1.Egress) bool { return eg.GetEgressId() == egs[0] }) {
			t.Errorf("after deleting %s: %v, %v", egs[0], res, err)
		}
	})
}

// An update is CAS on revision; a change advances it by one and stores
// drain_seconds with it, the same spec changes nothing.
func TestUpdateEgressRevisionAndDrain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		eg := e.createEgress(t, "c1", socks(false), map[string]string{"k": "v"})
		id := eg.GetEgressId()
		update := func(command string, expected uint64, spec *ctrlv1.EgressSpec, drain uint32) (*ctrlv1.Egress, error) {
			res, err := e.eg.UpdateEgress(ctx, &ctrlv1.UpdateEgressRequest{Command: cmd(command), EgressId: id, ExpectedRevision: expected, Spec: spec, DrainSeconds: drain})
			return res.GetEgress(), err
		}
		drainOf := func() uint32 {
			var r *store.EgressRecord
			if err := e.store.Tx(ctx, func(tx *store.Tx) (err error) { r, err = tx.GetEgress(id, false); return err }); err != nil {
				t.Fatal(err)
			}
			return r.DrainSeconds
		}
		_, err := update("u0", 2, socks(true), 0)
		wantCode(t, "stale revision", err, connect.CodeFailedPrecondition, "expected_revision")
		_, err = update("u0b", 1, socks(true), egress.MaxDrainSeconds+1)
		wantCode(t, "drain too long", err, connect.CodeInvalidArgument, "drain_seconds")
		_, err = update("u0c", 1, &ctrlv1.EgressSpec{Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5}, 0)
		wantCode(t, "invalid spec", err, connect.CodeInvalidArgument, "spec.endpoint")
		same, err := update("u1", 1, socks(false), 30)
		if err != nil || same.GetRevision() != 1 || drainOf() != 0 {
			t.Errorf("same spec: %v, %v, drain %d; want revision 1 and nothing stored", same, err, drainOf())
		}
		next, err := update("u2", 1, socks(true), 30)
		if err != nil || next.GetRevision() != 2 || !next.GetSpec().GetUdpEnabled() || next.GetLabels()["k"] != "v" ||
			!next.GetUpdatedAt().AsTime().After(eg.GetCreatedAt().AsTime()) && !next.GetUpdatedAt().AsTime().Equal(eg.GetCreatedAt().AsTime()) {
			t.Fatalf("update: %v, %v; want revision 2 with udp, labels kept", next, err)
		}
		if d := drainOf(); d != 30 {
			t.Errorf("drain_seconds stored %d, want 30", d)
		}
		if replay, err := update("u2", 1, socks(true), 30); err != nil || !proto.Equal(replay, next) {
			t.Errorf("replay after the revision moved on: %v, %v; want the recorded answer", replay, err)
		}
		_, err = update("u2", 1, socks(true), 31)
		wantCode(t, "same command, other drain", err, connect.CodeAlreadyExists, "command.command_id")
		if _, err := e.eg.DeleteEgress(ctx, &ctrlv1.DeleteEgressRequest{Command: cmd("d"), EgressId: id}); err != nil {
			t.Fatal(err)
		}
		_, err = update("u3", 2, socks(false), 0)
		wantCode(t, "update a deleted egress", err, connect.CodeFailedPrecondition, "")
	})
}

func TestUpdateResolver(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		r := e.createResolver(t, "c1", udpResolver(), nil)
		tcp := &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP, Address: "10.1.2.3:53"}
		_, err := e.eg.UpdateResolver(ctx, &ctrlv1.UpdateResolverRequest{Command: cmd("u0"), ResolverId: r.GetResolverId(), ExpectedRevision: 0, Spec: tcp})
		wantCode(t, "stale revision", err, connect.CodeFailedPrecondition, "expected_revision")
		res, err := e.eg.UpdateResolver(ctx, &ctrlv1.UpdateResolverRequest{Command: cmd("u1"), ResolverId: r.GetResolverId(), ExpectedRevision: 1, Spec: tcp})
		if err != nil || res.GetResolver().GetRevision() != 2 || res.GetResolver().GetSpec().GetProtocol() != tcp.GetProtocol() {
			t.Fatalf("update: %v, %v; want revision 2 over TCP", res, err)
		}
		same, err := e.eg.UpdateResolver(ctx, &ctrlv1.UpdateResolverRequest{Command: cmd("u2"), ResolverId: r.GetResolverId(), ExpectedRevision: 2, Spec: tcp})
		if err != nil || same.GetResolver().GetRevision() != 2 {
			t.Errorf("same spec: %v, %v; want revision 2 kept", same, err)
		}
		del, err := e.eg.DeleteResolver(ctx, &ctrlv1.DeleteResolverRequest{Command: cmd("d1"), ResolverId: r.GetResolverId()})
		if err != nil || !del.GetResolver().GetDeleted() {
			t.Fatalf("delete: %v, %v", del, err)
		}
		again, err := e.eg.DeleteResolver(ctx, &ctrlv1.DeleteResolverRequest{Command: cmd("d2"), ResolverId: r.GetResolverId()})
		if err != nil || !proto.Equal(again.GetResolver(), del.GetResolver()) {
			t.Errorf("deleting a deleted resolver: %v, %v; want it as it is", again, err)
		}
		got, err := e.eg.GetResolver(ctx, &ctrlv1.GetResolverRequest{ResolverId: r.GetResolverId()})
		if err != nil || !got.GetResolver().GetDeleted() {
			t.Errorf("get after delete: %v, %v; want it, deleted", got, err)
		}
		_, err = e.eg.UpdateResolver(ctx, &ctrlv1.UpdateResolverRequest{Command: cmd("u3"), ResolverId: r.GetResolverId(), ExpectedRevision: 2, Spec: tcp})
		wantCode(t, "update a deleted resolver", err, connect.CodeFailedPrecondition, "")
	})
}

// A policy names only existing, undeleted records; those it names cannot
// be deleted while it does, and the refusal names the Workspaces.
func TestPolicyReferences(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		eg := e.createEgress(t, "e1", socks(true), nil)
		r := e.createResolver(t, "r1", udpResolver(), nil)
		_, err := e.createWorkspace("w-missing-egress", policy("egr-none", "", false))
		wantCode(t, "missing egress", err, connect.CodeNotFound, "spec.network_policy.egresses[0].egress_id")
		_, err = e.createWorkspace("w-missing-resolver", policy(eg.GetEgressId(), "rsv-none", false))
		wantCode(t, "missing resolver", err, connect.CodeNotFound, "spec.network_policy.resolvers[0].resolver_id")
		w1, err := e.createWorkspace("w1", policy(eg.GetEgressId(), r.GetResolverId(), false))
		if err != nil {
			t.Fatal(err)
		}
		w2, err := e.createWorkspace("w2", policy(eg.GetEgressId(), "", false))
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.eg.DeleteEgress(ctx, &ctrlv1.DeleteEgressRequest{Command: cmd("de"), EgressId: eg.GetEgressId()})
		wantCode(t, "delete a used egress", err, connect.CodeFailedPrecondition, "")
		want := []string{w1.GetWorkspaceId(), w2.GetWorkspaceId()}
		slices.Sort(want)
		if got := workspaceIDs(err); !slices.Equal(got, want) || !strings.Contains(err.Error(), want[0]) || !strings.Contains(err.Error(), want[1]) {
			t.Errorf("refusal names %v (%v), want %v", got, err, want)
		}
		_, err = e.eg.DeleteResolver(ctx, &ctrlv1.DeleteResolverRequest{Command: cmd("dr"), ResolverId: r.GetResolverId()})
		wantCode(t, "delete a used resolver", err, connect.CodeFailedPrecondition, "")
		if got := workspaceIDs(err); !slices.Equal(got, []string{w1.GetWorkspaceId()}) {
			t.Errorf("resolver refusal names %v, want [%s]", got, w1.GetWorkspaceId())
		}
		// Deleted records are not_found to a policy, as missing ones are.
		other := e.createEgress(t, "e2", socks(false), nil)
		if _, err := e.eg.DeleteEgress(ctx, &ctrlv1.DeleteEgressRequest{Command: cmd("d2"), EgressId: other.GetEgressId()}); err != nil {
			t.Fatal(err)
		}
		_, err = e.createWorkspace("w-deleted", policy(other.GetEgressId(), "", false))
		wantCode(t, "deleted egress", err, connect.CodeNotFound, "spec.network_policy.egresses[0].egress_id")
		gone := e.createResolver(t, "r2", udpResolver(), nil)
		if _, err := e.eg.DeleteResolver(ctx, &ctrlv1.DeleteResolverRequest{Command: cmd("d3"), ResolverId: gone.GetResolverId()}); err != nil {
			t.Fatal(err)
		}
		_, err = e.createWorkspace("w-deleted-resolver", policy(eg.GetEgressId(), gone.GetResolverId(), false))
		wantCode(t, "deleted resolver", err, connect.CodeNotFound, "spec.network_policy.resolvers[0].resolver_id")
		_, err = e.ws.UpdateNetworkPolicy(ctx, &ctrlv1.UpdateWorkspaceNetworkPolicyRequest{Command: cmd("up"), WorkspaceId: w2.GetWorkspaceId(),
			ExpectedRevision: 1, NetworkPolicy: policy(other.GetEgressId(), "", false)})
		wantCode(t, "update to a deleted egress", err, connect.CodeNotFound, "network_policy.egresses[0].egress_id")
	})
}

// A udp Resolver needs its Egress's udp_enabled: in a policy
// (invalid_argument), and later updates cannot take it away
// (failed_precondition naming the Workspaces).
func TestUDPResolverNeedsUDPEgress(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		tcpOnly := e.createEgress(t, "e1", socks(false), nil)
		withUDP := e.createEgress(t, "e2", socks(true), nil)
		udp := e.createResolver(t, "r1", udpResolver(), nil)
		tcpSpec := &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP, Address: "10.1.2.3:53"}
		tcp := e.createResolver(t, "r2", tcpSpec, nil)
		_, err := e.createWorkspace("w0", policy(tcpOnly.GetEgressId(), udp.GetResolverId(), false))
		wantCode(t, "udp through an egress without udp", err, connect.CodeInvalidArgument, "spec.network_policy.resolvers[0].path.egress_id")
		w1, err := e.createWorkspace("w1", policy(withUDP.GetEgressId(), udp.GetResolverId(), false))
		if err != nil {
			t.Fatal(err)
		}
		w2, err := e.createWorkspace("w2", policy(tcpOnly.GetEgressId(), tcp.GetResolverId(), false))
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.eg.UpdateEgress(ctx, &ctrlv1.UpdateEgressRequest{Command: cmd("u1"), EgressId: withUDP.GetEgressId(), ExpectedRevision: 1, Spec: socks(false)})
		wantCode(t, "turn udp off under a udp resolver", err, connect.CodeFailedPrecondition, "")
		if got := workspaceIDs(err); !slices.Equal(got, []string{w1.GetWorkspaceId()}) {
			t.Errorf("names %v, want [%s]", got, w1.GetWorkspaceId())
		}
		_, err = e.eg.UpdateResolver(ctx, &ctrlv1.UpdateResolverRequest{Command: cmd("u2"), ResolverId: tcp.GetResolverId(), ExpectedRevision: 1, Spec: udpResolver()})
		wantCode(t, "make a resolver udp through a tcp-only egress", err, connect.CodeFailedPrecondition, "")
		if got := workspaceIDs(err); !slices.Equal(got, []string{w2.GetWorkspaceId()}) {
			t.Errorf("names %v, want [%s]", got, w2.GetWorkspaceId())
		}
		// Changes that keep every policy valid go through.
		if _, err := e.eg.UpdateEgress(ctx, &ctrlv1.UpdateEgressRequest{Command: cmd("u3"), EgressId: tcpOnly.GetEgressId(), ExpectedRevision: 1, Spec: socks(true)}); err != nil {
			t.Errorf("turning udp on: %v", err)
		}
	})
}

// The direct path never reaches a special-purpose address, so a policy
// sending queries there directly is refused when it is set.
func TestDirectResolverPathRefusesSpecialPurpose(t *testing.T) {
	e := sqlite(t)
	private := e.createResolver(t, "r1", udpResolver(), nil)
	public := e.createResolver(t, "r2", &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_HTTPS, Url: "https://9.9.9.9/dns-query"}, nil)
	_, err := e.createWorkspace("w0", policy("", private.GetResolverId(), true))
	wantCode(t, "direct to 10.1.2.3", err, connect.CodeInvalidArgument, "spec.network_policy.resolvers[0].path.direct")
	if _, err := e.createWorkspace("w1", policy("", public.GetResolverId(), true)); err != nil {
		t.Fatalf("direct to a public address: %v", err)
	}
	_, err = e.eg.UpdateResolver(ctx, &ctrlv1.UpdateResolverRequest{Command: cmd("u"), ResolverId: public.GetResolverId(), ExpectedRevision: 1,
		Spec: &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_HTTPS, Url: "https://127.0.0.1/dns-query"}})
	wantCode(t, "move a direct resolver to loopback", err, connect.CodeFailedPrecondition, "")
}
