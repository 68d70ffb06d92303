package resolver_test

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node/netslot/egress/egresstest"
	"github.com/kibotos/kibotos/internal/node/netslot/resolver"
)

const fuzzID = 0x4242

// FuzzUpstreamAnswer: whatever bytes an upstream answers, as a datagram
// (udp), as a stream (tcp, its framing included) or as a DoH body, Exchange
// returns an answer or an upstream fault, never panics, and takes a well-
// formed response to the query. The upstreams are pipes (and an in-process
// net/http server over them for DoH), so each input is one exchange.
func FuzzUpstreamAnswer(f *testing.F) {
	q := new(dns.Msg)
	q.SetQuestion("upstream.test.", dns.TypeA)
	q.Id = fuzzID
	good := new(dns.Msg)
	good.SetReply(q)
	good.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "upstream.test.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.IPv4(192, 0, 2, 1)}}
	wire, _ := good.Pack()
	good.Id = 0
	dohWire, _ := good.Pack()
	for proto := range 3 {
		f.Add(uint8(proto), wire)
		f.Add(uint8(proto), append([]byte{byte(len(wire) >> 8), byte(len(wire))}, wire...))
		f.Add(uint8(proto), dohWire)
		f.Add(uint8(proto), []byte{})
		f.Add(uint8(proto), wire[:7])
	}
	doh := startFuzzDoH(f)
	f.Fuzz(func(t *testing.T, proto uint8, answer []byte) {
		var spec *ctrlv1.ResolverSpec
		var path resolver.Path = pipePath{answer}
		switch proto % 3 {
		case 0:
			spec = &ctrlv1.ResolverSpec{Protocol: udp, Address: "192.0.2.53:53"}
		case 1:
			spec = &ctrlv1.ResolverSpec{Protocol: tcp, Address: "192.0.2.53:53"}
		default:
			spec = &ctrlv1.ResolverSpec{Protocol: https, Url: "https://192.0.2.53/dns-query", ServerName: "dns.test"}
			path = doh
			doh.body.Store(&answer)
		}
		u, err := resolver.New(resolver.Config{Spec: spec, Path: path, RootCAs: doh.ca.Pool, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		reply, err := u.Exchange(context.Background(), q.Copy())
		if err != nil {
			if _, ok := resolver.KindOf(err); !ok || reply != nil {
				t.Fatalf("answer %x: %v, %v; want nil and an upstream fault", answer, reply, err)
			}
		} else if reply == nil {
			t.Fatalf("answer %x: no answer and no error", answer)
		}
		if wellFormed(proto%3, answer) && err != nil {
			t.Fatalf("answer %x is a response to the query; Exchange failed: %v", answer, err)
		}
	})
}

// wellFormed: the bytes are, for a datagram or a DoH body, a whole DNS
// response to the query (ID 0 for DoH, as it asks), not truncated.
func wellFormed(proto uint8, b []byte) bool {
	m := new(dns.Msg)
	if proto == 1 || m.Unpack(b) != nil || !m.Response || m.Truncated {
		return false
	}
	return proto == 0 && m.Id == fuzzID || proto == 2 && m.Id == 0
}

// pipePath answers every connection and socket with answer: it reads the
// query, writes answer once and closes.
type pipePath struct{ answer []byte }

func (p pipePath) DialTCP(context.Context, netip.AddrPort) (net.Conn, error) { return p.serve(), nil }
func (p pipePath) DialUDP(context.Context, netip.AddrPort) (net.Conn, error) { return p.serve(), nil }

func (p pipePath) serve() net.Conn {
	node, far := net.Pipe()
	go func() {
		defer far.Close()
		buf := make([]byte, 65535)
		if _, err := far.Read(buf); err != nil {
			return
		}
		_, _ = far.Write(p.answer)
	}()
	return node
}

// fuzzDoH is a net/http DoH server reached through pipes, answering 200
// with the current body.
type fuzzDoH struct {
	ca    *egresstest.CA
	body  atomic.Pointer[[]byte]
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func startFuzzDoH(f testing.TB) *fuzzDoH {
	d := &fuzzDoH{ca: egresstest.NewCA(f), conns: make(chan net.Conn), done: make(chan struct{})}
	cert := d.ca.Server(f, "dns.test")
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/dns-message")
			_, _ = w.Write(*d.body.Load())
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	go func() { _ = srv.ServeTLS(d, "", "") }()
	f.Cleanup(func() { _ = srv.Close(); _ = d.Close() })
	return d
}

func (d *fuzzDoH) DialTCP(ctx context.Context, _ netip.AddrPort) (net.Conn, error) {
	node, far := net.Pipe()
	select {
	case d.conns <- far:
		return node, nil
	case <-d.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (d *fuzzDoH) DialUDP(context.Context, netip.AddrPort) (net.Conn, error) {
	return nil, net.ErrClosed
}

// Accept, Close and Addr make fuzzDoH the server's listener.
func (d *fuzzDoH) Accept() (net.Conn, error) {
	select {
	case c := <-d.conns:
		return c, nil
	case <-d.done:
		return nil, net.ErrClosed
	}
}

func (d *fuzzDoH) Close() error {
	d.once.Do(func() { close(d.done) })
	return nil
}

func (d *fuzzDoH) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 53), Port: 443} }
