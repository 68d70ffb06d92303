// Package resolvertest runs a real DNS upstream for tests: github.com/miekg/dns
// servers answering fixed records over udp, tcp and DNS over TLS, and a
// net/http DNS over HTTPS server, all listening in a test internet's
// namespace, the TLS ones with a certificate from a test CA
// (egresstest's). A Mode makes them fail the ways a Resolver can.
package resolvertest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kibotos/kibotos/internal/node/netslot/egress/egresstest"
)

// The records every server answers; any other name is NXDOMAIN.
const (
	Name       = "upstream.test."
	BigName    = "big.upstream.test." // a TXT answer too long for a 512-byte datagram
	TXT        = "kibotos resolvertest"
	ServerName = "dns.test" // the name the TLS servers' certificate is for
	Path       = "/dns-query"
)

var (
	A    = netip.MustParseAddr("192.0.2.80")
	AAAA = netip.MustParseAddr("2001:db8::80")
)

// Mode is how the servers answer.
type Mode int32

const (
	Answer    Mode = iota // the records
	ServFail              // SERVFAIL to every query (a DNS result, not a fault)
	HTTPError             // DoH answers 503; the others answer the records
	Silent                // no answer at all (DoH holds the request open)
	WrongCert             // the TLS servers present a certificate for another name
)

// Netns is where the servers' sockets are made: a test internet
// (testnet.Internet), whose Run runs fn on a thread inside it.
type Netns interface {
	Run(fn func() error) error
}

// Server is one running upstream of every protocol on one address.
type Server struct {
	UDP, TCP, TLS netip.AddrPort
	URL           string // https://IP:port/dns-query
	NamedURL      string // https://ServerName:port/dns-query, for a Lookup that knows ServerName
	CA            *egresstest.CA

	mode    atomic.Int32
	queries atomic.Int64
	stop    sync.Once
	dns     []*dns.Server
	http    *http.Server
}

// SetMode changes how the servers answer from the next query on.
func (s *Server) SetMode(m Mode) { s.mode.Store(int32(m)) }

// Queries is how many DNS queries the servers have read.
func (s *Server) Queries() int64 { return s.queries.Load() }

// Start runs the servers in ns on ip until the test ends or Stop: udp and
// tcp on one port, DoT and DoH on ports of their own.
func Start(t testing.TB, ns Netns, ip netip.Addr) *Server {
	t.Helper()
	s, err := Open(ns, ip)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Open is Start for a program (a benchmark): a failure is its error, and
// the servers run until Close.
func Open(ns Netns, ip netip.Addr) (*Server, error) {
	ca, err := egresstest.OpenCA()
	if err != nil {
		return nil, err
	}
	s := &Server{CA: ca}
	good, err := ca.Issue(ServerName)
	if err != nil {
		return nil, err
	}
	wrong, err := ca.Issue("other.test")
	if err != nil {
		return nil, err
	}
	tlsConf := &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if Mode(s.mode.Load()) == WrongCert {
			return &wrong, nil
		}
		return &good, nil
	}}
	pc, tcpL, dotL, dohL, err := listen(ns, netip.AddrPortFrom(ip, 0))
	if err != nil {
		return nil, fmt.Errorf("resolvertest on %s: %w", ip, err)
	}
	s.UDP, s.TCP = addrOf(pc.LocalAddr()), addrOf(tcpL.Addr())
	s.TLS = addrOf(dotL.Addr())
	dohPort := strconv.Itoa(int(addrOf(dohL.Addr()).Port()))
	s.URL = "https://" + net.JoinHostPort(ip.String(), dohPort) + Path
	s.NamedURL = "https://" + net.JoinHostPort(ServerName, dohPort) + Path
	handler := dns.HandlerFunc(s.serveDNS)
	s.dns = []*dns.Server{
		{PacketConn: pc, Handler: handler},
		{Listener: tcpL, Handler: handler},
		{Listener: tls.NewListener(dotL, tlsConf), Handler: handler},
	}
	for _, srv := range s.dns {
		go func() { _ = srv.ActivateAndServe() }()
	}
	s.http = &http.Server{Handler: http.HandlerFunc(s.serveHTTP), TLSConfig: tlsConf,
		ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = s.http.ServeTLS(dohL, "", "") }()
	return s, nil
}

// listen makes the servers' sockets in ns on bind: a failure closes the
// ones already made.
func listen(ns Netns, bind netip.AddrPort) (pc net.PacketConn, tcpL, dotL, dohL net.Listener, err error) {
	var made []io.Closer
	err = ns.Run(func() (err error) {
		if pc, err = net.ListenPacket("udp", bind.String()); err != nil {
			return err
		}
		made = append(made, pc)
		// tcp on udp's port, as a DNS server is: a truncated udp answer
		// is asked again there.
		if tcpL, err = net.Listen("tcp", pc.LocalAddr().String()); err != nil {
			return err
		}
		made = append(made, tcpL)
		if dotL, err = net.Listen("tcp", bind.String()); err != nil {
			return err
		}
		made = append(made, dotL)
		dohL, err = net.Listen("tcp", bind.String())
		return err
	})
	if err != nil {
		for _, c := range made {
			_ = c.Close()
		}
	}
	return pc, tcpL, dotL, dohL, err
}

func addrOf(a net.Addr) netip.AddrPort { return netip.MustParseAddrPort(a.String()) }

// Close is Stop, as an io.Closer.
func (s *Server) Close() error { s.Stop(); return nil }

// Stop closes every server: the upstream is then unreachable.
func (s *Server) Stop() {
	s.stop.Do(func() {
		for _, srv := range s.dns {
			_ = srv.Shutdown()
		}
		_ = s.http.Close()
	})
}

func (s *Server) serveDNS(w dns.ResponseWriter, q *dns.Msg) {
	s.queries.Add(1)
	if Mode(s.mode.Load()) == Silent {
		return
	}
	reply := s.reply(q)
	if _, udp := w.LocalAddr().(*net.UDPAddr); udp {
		size := 512
		if opt := q.IsEdns0(); opt != nil {
			size = int(opt.UDPSize())
		}
		reply.Truncate(size)
	}
	_ = w.WriteMsg(reply)
}

// reply answers q from the fixed records.
func (s *Server) reply(q *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(q)
	if Mode(s.mode.Load()) == ServFail || len(q.Question) != 1 {
		m.Rcode = dns.RcodeServerFailure
		return m
	}
	qq := q.Question[0]
	hdr := dns.RR_Header{Name: qq.Name, Class: dns.ClassINET, Ttl: 60, Rrtype: qq.Qtype}
	switch {
	case strings.EqualFold(qq.Name, Name) && qq.Qtype == dns.TypeA:
		m.Answer = []dns.RR{&dns.A{Hdr: hdr, A: A.AsSlice()}}
	case strings.EqualFold(qq.Name, Name) && qq.Qtype == dns.TypeAAAA:
		m.Answer = []dns.RR{&dns.AAAA{Hdr: hdr, AAAA: AAAA.AsSlice()}}
	case strings.EqualFold(qq.Name, Name) && qq.Qtype == dns.TypeTXT:
		m.Answer = []dns.RR{&dns.TXT{Hdr: hdr, Txt: []string{TXT}}}
	case strings.EqualFold(qq.Name, BigName) && qq.Qtype == dns.TypeTXT:
		for i := 0; i < 8; i++ {
			m.Answer = append(m.Answer, &dns.TXT{Hdr: hdr, Txt: []string{strings.Repeat(string(rune('a'+i)), 200)}})
		}
	case strings.EqualFold(qq.Name, Name), strings.EqualFold(qq.Name, BigName):
	default:
		m.Rcode = dns.RcodeNameError
	}
	return m
}

// serveHTTP is RFC 8484's POST: the body is the query, the answer is
// application/dns-message.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != Path || r.Header.Get("Content-Type") != "application/dns-message" {
		http.Error(w, "POST application/dns-message to "+Path, http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, dns.MaxMsgSize))
	q := new(dns.Msg)
	if err == nil {
		err = q.Unpack(body)
	}
	if err != nil {
		http.Error(w, "not a DNS message", http.StatusBadRequest)
		return
	}
	s.queries.Add(1)
	switch Mode(s.mode.Load()) {
	case HTTPError:
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	case Silent:
		<-r.Context().Done()
		return
	}
	out, err := s.reply(q).Pack()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/dns-message")
	_, _ = w.Write(out)
}

// ErrNoLookups is what Lookup answers for a name it does not know.
var ErrNoLookups = errors.New("resolvertest resolves only ServerName")

// Lookup resolves ServerName to ip and nothing else: a test's lookup must
// not leave the machine.
func Lookup(ip netip.Addr) func(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return func(_ context.Context, _, host string) ([]netip.Addr, error) {
		if host == ServerName {
			return []netip.Addr{ip}, nil
		}
		return nil, ErrNoLookups
	}
}
