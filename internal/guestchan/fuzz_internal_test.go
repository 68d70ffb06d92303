package guestchan

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// iterationLimit bounds one fuzz input: a handshake that has not returned
// by then hangs.
const iterationLimit = 5 * time.Second

// guestPort is the guest's end of the port for one input: it reads the
// input's bytes, then EOF, and keeps what the guest writes.
type guestPort struct {
	r       io.Reader
	written bytes.Buffer
}

func (p *guestPort) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p *guestPort) Write(b []byte) (int, error) { return p.written.Write(b) }
func (p *guestPort) Close() error                { return nil }

// runGuest runs guestHandshake on input and, once it succeeded, reads what
// its connection reads; it fails the test if either does not end in time.
func runGuest(t *testing.T, input []byte) (conn []byte, acks []byte, err error) {
	t.Helper()
	port := &guestPort{r: bytes.NewReader(input)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var rw io.ReadWriteCloser
		if rw, err = guestHandshake(port); err == nil {
			conn, _ = io.ReadAll(rw)
		}
	}()
	select {
	case <-done:
	case <-time.After(iterationLimit):
		t.Fatalf("the guest's handshake on %q has not returned in %s", input, iterationLimit)
	}
	return conn, port.written.Bytes(), err
}

// checkACKs: the guest writes nothing but ACK lines, each answering a
// SYNC of the input with its nonce, each nonce answered once in a row.
func checkACKs(t *testing.T, input, acks []byte) {
	t.Helper()
	last := ""
	for len(acks) > 0 {
		line, rest, ok := bytes.Cut(acks, []byte("\n"))
		if !ok || !bytes.HasPrefix(line, ackPrefix) {
			t.Fatalf("the guest wrote %q, which is not ACK lines", acks)
		}
		nonce := string(line[len(ackPrefix):])
		if !bytes.Contains(input, append(append(append([]byte{}, syncPrefix...), nonce...), '\n')) {
			t.Fatalf("the guest answered the nonce %q, which no SYNC of %q carries", nonce, input)
		}
		if nonce == last {
			t.Fatalf("the guest answered %q twice in a row", nonce)
		}
		last, acks = nonce, rest
	}
}

// FuzzHandshake: whatever bytes are left on the port before a connection
// — a previous connection's HTTP/2 frames, partial or repeated SYNCs and
// ACKs, prefaces — neither end of the handshake panics or hangs (each is
// bounded by a deadline). The guest writes only ACKs that answer a SYNC it
// read; it finishes only on a preface that follows a SYNC, and then hands
// on exactly the preface and the bytes after it. Followed by a SYNC, the
// preface and more, any leftover ends in a connection that reads that
// "more". The host accepts only the ACK of its own nonce, whatever else it
// reads before, and then reads exactly what follows the ACK.
func FuzzHandshake(f *testing.F) {
	sync := func(n string) string { return string(syncPrefix) + n + "\n" }
	ack := func(n string) string { return string(ackPrefix) + n + "\n" }
	for _, s := range []string{
		"",
		sync("n1") + string(http2Preface) + "frames",
		string(http2Preface) + sync("n1") + string(http2Preface),
		sync("n1") + sync("n1") + sync("n2") + string(http2Preface),
		"\x00KIBOTOS-SYNC:",
		"\x00KIBOTOS-SYNC:unterminated",
		"\x00KIBOTOS-SY" + sync("n1") + "PRI * HTTP/2.0\r\n\r\nSM\r\n",
		ack("0123456789abcdef") + ack("x") + "\x00KIBOTOS-ACK:",
		string(make([]byte, MaxFrameSize+9)) + sync("n") + string(http2Preface),
		"\x00\x00\x00\x04\x00\x00\x00\x00\x00" + ack("stale"),
	} {
		f.Add([]byte(s), []byte("after"), uint16(0))
	}
	f.Add([]byte("leftover"), []byte("after"), uint16(len("leftover\n")+3)) // a read timeout inside the ACK
	f.Fuzz(func(t *testing.T, leftover, after []byte, timeoutAt uint16) {
		fuzzGuest(t, leftover, after)
		fuzzHost(t, leftover, after, int(timeoutAt))
	})
}

func fuzzGuest(t *testing.T, leftover, after []byte) {
	conn, acks, err := runGuest(t, leftover)
	checkACKs(t, leftover, acks)
	if err == nil {
		// conn is the preface and the rest of the leftover after a
		// preface that follows a SYNC.
		rest, ok := bytes.CutPrefix(conn, http2Preface)
		end := len(leftover) - len(rest)
		sync := bytes.Index(leftover, syncPrefix)
		if !ok || !bytes.HasSuffix(leftover, rest) || sync < 0 || sync > end || !bytes.HasSuffix(leftover[sync:end], http2Preface) {
			t.Fatalf("the guest finished on %q, handing on %q", leftover, conn)
		}
	}

	// The host's next connection, after the leftover.
	input := bytes.Join([][]byte{leftover, []byte("\n"), syncPrefix, []byte("fresh\n"), http2Preface, after}, nil)
	conn, acks, err = runGuest(t, input)
	if err != nil {
		t.Fatalf("the guest did not finish on %q: %v", input, err)
	}
	checkACKs(t, input, acks)
	if !bytes.HasPrefix(conn, http2Preface) || !bytes.HasSuffix(conn, after) {
		t.Fatalf("after %q the guest's connection reads %q", leftover, conn)
	}
}

// timeoutConn fails one read with a timeout once at bytes have been read,
// as the host's one-second read deadline does when it falls there.
type timeoutConn struct {
	net.Conn
	at, read int
	fired    bool
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout (injected)" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func (c *timeoutConn) Read(p []byte) (int, error) {
	if !c.fired && c.read+len(p) > c.at {
		if c.read == c.at {
			c.fired = true
			return 0, timeoutError{}
		}
		p = p[:c.at-c.read]
	}
	n, err := c.Conn.Read(p)
	c.read += n
	return n, err
}

// fuzzHost runs hostHandshake against a guest that writes the leftover and
// then either closes (acked false) or answers the host's SYNC with its
// nonce followed by after. One of the host's reads times out at
// timeoutAt, as its read deadline may.
func fuzzHost(t *testing.T, leftover, after []byte, timeoutAt int) {
	for _, acked := range []bool{false, true} {
		pipe, guest := net.Pipe()
		// Within what the host reads up to the end of the ACK line
		// (the leftover, "\n", the prefix, 16 hex digits).
		host := &timeoutConn{Conn: pipe, at: timeoutAt % (len(leftover) + 1 + len(ackPrefix) + 16)}
		ctx, cancel := context.WithTimeout(context.Background(), iterationLimit)
		go func() {
			defer guest.Close()
			r := bufio.NewReader(guest)
			if _, err := r.ReadBytes(syncPrefix[len(syncPrefix)-1]); err != nil { // the flush of zeros, then SYNC up to ':'
				return
			}
			nonce, err := r.ReadString('\n')
			if err != nil {
				return
			}
			nonce = nonce[:len(nonce)-1]
			go func() { _, _ = io.Copy(io.Discard, r) }() // SYNCs again, until the host is done
			if _, err := guest.Write(leftover); err != nil {
				return
			}
			if acked {
				msg := bytes.Join([][]byte{[]byte("\n"), ackPrefix, []byte(nonce + "\n"), after}, nil)
				if _, err := guest.Write(msg); err != nil {
					return
				}
				<-ctx.Done() // the host reads after and closes
			}
		}()
		type result struct {
			conn net.Conn
			err  error
		}
		done := make(chan result, 1)
		go func() {
			c, err := hostHandshake(ctx, host)
			done <- result{c, err}
		}()
		var res result
		select {
		case res = <-done:
		case <-time.After(iterationLimit + time.Second):
			t.Fatalf("the host's handshake after %q (acked %v) has not returned", leftover, acked)
		}
		switch {
		case !acked && res.err == nil:
			t.Fatalf("the host accepted a guest that never sent its nonce, after %q", leftover)
		case acked && res.err != nil:
			t.Fatalf("the host refused its own ACK after %q: %v", leftover, res.err)
		case acked:
			host.fired = true // the handshake is over: no more timeouts
			_ = res.conn.SetReadDeadline(time.Now().Add(iterationLimit))
			got := make([]byte, len(after))
			if _, err := io.ReadFull(res.conn, got); err != nil || !bytes.Equal(got, after) {
				t.Fatalf("after %q the host's connection reads %q, %v; want %q", leftover, got, err, after)
			}
		}
		cancel()
		host.Close()
	}
}
