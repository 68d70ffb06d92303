package egress

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"time"
)

// httpConnect asks the HTTP proxy on conn to CONNECT to dst, with basic
// proxy authorization when the spec has credentials. net/http writes the
// request and parses the response.
func (d *Dialer) httpConnect(ctx context.Context, conn net.Conn, dst netip.AddrPort) (net.Conn, error) {
	// The exchange runs on conn directly, so ctx's end must interrupt it.
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	req := &http.Request{
		Method: http.MethodConnect,
		URL:    &url.URL{Host: dst.String()},
		Host:   dst.String(),
		Header: http.Header{},
	}
	if u, p := d.cfg.Spec.GetUsername(), d.cfg.Spec.GetPassword(); u != "" || p != "" {
		req.SetBasicAuth(u, p)
		req.Header["Proxy-Authorization"] = req.Header["Authorization"]
		delete(req.Header, "Authorization")
	}
	br := bufio.NewReader(conn)
	resp, err := roundTrip(conn, br, req)
	if err != nil {
		_ = conn.Close()
		return nil, fault(HandshakeFailed, err)
	}
	// The body is left alone, as net/http's Transport does for CONNECT:
	// after a 2xx what follows is the tunnel.
	if err := connectStatus(resp.StatusCode, resp.Status); err != nil {
		_ = conn.Close()
		return nil, err
	}
	if !stop() || conn.SetDeadline(time.Time{}) != nil {
		_ = conn.Close()
		return nil, fault(HandshakeFailed, ctx.Err())
	}
	return &bufferedConn{Conn: conn, r: br}, nil
}

func roundTrip(conn net.Conn, br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if err := req.Write(conn); err != nil {
		return nil, fmt.Errorf("write CONNECT: %w", err)
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("read CONNECT response: %w", err)
	}
	return resp, nil
}

// connectStatus: 2xx opened the tunnel; 407 rejected the credentials; 403
// (refused by the proxy's rules), 502 and 504 (the proxy could not reach
// the destination) and 503 are the destination's result; anything else
// means the endpoint does not serve CONNECT as asked.
func connectStatus(code int, status string) error {
	switch {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusProxyAuthRequired:
		return fault(AuthenticationFailed, fmt.Errorf("CONNECT: %s", status))
	case code == http.StatusForbidden, code == http.StatusBadGateway, code == http.StatusServiceUnavailable, code == http.StatusGatewayTimeout:
		return fmt.Errorf("%w: CONNECT: %s", ErrDestination, status)
	}
	return fault(HandshakeFailed, fmt.Errorf("CONNECT: %s", status))
}

// bufferedConn reads what the proxy sent after its response (the
// destination's first bytes) before reading conn again.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite passes the guest's half close on, as the slot's splice does.
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
