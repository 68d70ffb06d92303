package resolver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/miekg/dns"
)

// newHTTPClient is the DNS over HTTPS client: net/http, every connection
// through the Path to the url host's addresses, TLS verified as for tls
// upstreams, HTTP/2 when the server offers it (RFC 8484 section 5.2),
// keep-alive between queries, no environment proxy and no redirects (a
// redirect is an answer outside 2xx).
func (u *Upstream) newHTTPClient() *http.Client {
	tr := &http.Transport{
		DialContext:       u.dialHTTP,
		TLSClientConfig:   u.tls.Clone(),
		ForceAttemptHTTP2: true,
		MaxIdleConns:      maxIdle,
		IdleConnTimeout:   90 * time.Second,
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}

// dialHTTP connects to the url's host (addr is always it: redirects are
// not followed).
func (u *Upstream) dialHTTP(ctx context.Context, _, _ string) (net.Conn, error) {
	addrs, err := u.addrs(ctx)
	if err != nil {
		return nil, err
	}
	c, _, err := dialAny(ctx, addrs, u.cfg.Path.DialTCP)
	return c, err
}

// exchangeHTTPS POSTs q as application/dns-message to the url as given
// (RFC 8484 section 4.1), its ID 0 as the RFC asks, so caches can share
// answers; the answer gets q's ID back.
func (u *Upstream) exchangeHTTPS(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
	m := q.Copy()
	m.Id = 0
	body, err := m.Pack()
	if err != nil {
		return nil, fault(UpstreamUnreachable, fmt.Errorf("pack the query: %w", err))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.url, bytes.NewReader(body))
	if err != nil {
		return nil, fault(UpstreamUnreachable, err)
	}
	req.Header.Set("Content-Type", "application/dns-message")
	req.Header.Set("Accept", "application/dns-message")
	resp, err := u.http.Do(req)
	if err != nil {
		return nil, tlsFault(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// What is left of a short error body is read, so the connection
		// can be kept.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fault(HTTPErrorStatus, fmt.Errorf("POST %s: %s", u.url, resp.Status))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, dns.MaxMsgSize+1))
	if err != nil {
		return nil, exchangeFault(ctx, fmt.Errorf("read the answer: %w", err))
	}
	if len(b) > dns.MaxMsgSize {
		return nil, fault(UpstreamUnreachable, fmt.Errorf("POST %s: the answer is longer than a DNS message", u.url))
	}
	reply, err := answer(b, 0)
	if err != nil {
		return nil, fault(UpstreamUnreachable, err)
	}
	reply.Id = q.Id
	return reply, nil
}
