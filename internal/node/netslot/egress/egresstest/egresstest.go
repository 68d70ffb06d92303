// Package egresstest runs real Egress endpoints on loopback for tests: a
// SOCKS5 server (github.com/armon/go-socks5) and an HTTP CONNECT proxy
// (net/http), each with username and password and optionally behind TLS
// with a certificate from a CA made for the test. They dial only what
// their Dial func allows, so a test decides where its proxies may go.
package egresstest

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	socks5 "github.com/armon/go-socks5"
)

// User and Password are what the test endpoints accept.
const (
	User     = "guest"
	Password = "s3cret"
)

// CA is a certificate authority made for one test.
type CA struct {
	Pool *x509.CertPool
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA; its Pool trusts only it.
func NewCA(t testing.TB) *CA {
	t.Helper()
	ca, err := OpenCA()
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// OpenCA is NewCA for a program (a benchmark): a failure is its error.
func OpenCA() (*CA, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kibotos test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("test CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("test CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Pool: pool, cert: cert, key: key}, nil
}

// Server issues a server certificate for name (a DNS name, or an IP
// address the certificate then names).
func (ca *CA) Server(t testing.TB, name string) tls.Certificate {
	t.Helper()
	cert, err := ca.Issue(name)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// Issue is Server for a program: a failure is its error.
func (ca *CA) Issue(name string) (tls.Certificate, error) {
	key, err := newKey()
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.DNSNames, tmpl.IPAddresses = nil, []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certificate for %q: %w", name, err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("test key: %w", err)
	}
	return key, nil
}

// Dial is where a test endpoint connects on a client's behalf.
type Dial func(ctx context.Context, network, addr string) (net.Conn, error)

// Loopback dials only loopback addresses; anything else is refused, as a
// host that is not there.
func Loopback(ctx context.Context, network, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().IsLoopback() {
		return nil, errors.New("test endpoint dials loopback only: connection refused")
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// listen opens a loopback listener, behind TLS with cert when it is set,
// closed at the test's end.
func listen(t testing.TB, cert *tls.Certificate) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cert != nil {
		l = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{*cert}})
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// SOCKS5 starts a SOCKS5 server taking User and Password and returns its
// address.
func SOCKS5(t testing.TB, cert *tls.Certificate, dial Dial) netip.AddrPort {
	t.Helper()
	srv, err := socks5.New(&socks5.Config{
		Credentials: socks5.StaticCredentials{User: Password},
		Dial:        dial,
		Logger:      log.New(io.Discard, "", 0), // a refused client is what the tests do
	})
	if err != nil {
		t.Fatal(err)
	}
	l := listen(t, cert)
	go func() { _ = srv.Serve(l) }()
	return netip.MustParseAddrPort(l.Addr().String())
}

// HTTPConnect starts an HTTP proxy serving CONNECT with basic proxy
// authorization (User, Password) and returns its address: 407 for other
// credentials, 502 when the destination cannot be dialled.
func HTTPConnect(t testing.TB, cert *tls.Certificate, dial Dial) netip.AddrPort {
	t.Helper()
	l := listen(t, cert)
	srv := &http.Server{Handler: connectHandler(dial), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return netip.MustParseAddrPort(l.Addr().String())
}

func connectHandler(dial Dial) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		if u, p, ok := proxyAuth(r); !ok || u != User || p != Password {
			w.Header().Set("Proxy-Authenticate", `Basic realm="test"`)
			http.Error(w, "credentials rejected", http.StatusProxyAuthRequired)
			return
		}
		out, err := dial(r.Context(), "tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		in, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			_ = out.Close()
			return
		}
		_, _ = buf.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
		if buf.Flush() == nil {
			splice(in, buf.Reader, out)
		}
		_ = in.Close()
		_ = out.Close()
	}
}

// proxyAuth reads Proxy-Authorization as net/http reads Authorization.
func proxyAuth(r *http.Request) (string, string, bool) {
	h := http.Header{"Authorization": r.Header.Values("Proxy-Authorization")}
	return (&http.Request{Header: h}).BasicAuth()
}

// splice copies both ways, passing half closes on, until both are done.
func splice(in net.Conn, inBuf *bufio.Reader, out net.Conn) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(out, inBuf); closeWrite(out); done <- struct{}{} }()
	go func() { _, _ = io.Copy(in, out); closeWrite(in); done <- struct{}{} }()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// Echo starts a TCP server on loopback that answers each connection with
// what it reads, upper-cased, until the client half-closes.
func Echo(t testing.TB) netip.AddrPort {
	t.Helper()
	l := listen(t, nil)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go upper(c)
		}
	}()
	return netip.MustParseAddrPort(l.Addr().String())
}

func upper(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		for i := range buf[:n] {
			if 'a' <= buf[i] && buf[i] <= 'z' {
				buf[i] -= 'a' - 'A'
			}
		}
		if _, werr := c.Write(buf[:n]); werr != nil || err != nil {
			return
		}
	}
}

// Closed is a loopback address nothing listens on (a listener opened and
// closed at once).
func Closed(t testing.TB) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort(l.Addr().String())
	_ = l.Close()
	return ap
}
