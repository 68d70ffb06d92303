package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/miekg/dns"
)

// servers are the hosts a guest measures against, the same code on either
// side: in the test internet for the slot, on the host's loopback for
// QEMU's user-mode network.
type servers struct {
	connect net.Listener // accepts and closes: the connect target
	sink    net.Listener // reads to the end, answers "ok"
	dns     *dns.Server  // answers every A query with 192.0.2.7
	// transfers has one entry per connection the sink read to its end.
	transfers chan transfer
	closers   []io.Closer
}

// transfer is what the sink saw of one connection: its bytes and, on the
// server's clock, its first and last byte.
type transfer struct {
	bytes       int64
	first, last time.Time
	err         error
}

// in runs fn where the servers' sockets are to be made (a namespace, or
// here).
type in func(fn func() error) error

// startServers listens on host: TCP on any ports, DNS on dnsPort (0: any).
func startServers(run in, host netip.Addr, dnsPort uint16) (*servers, error) {
	s := &servers{transfers: make(chan transfer, 16)}
	var pc net.PacketConn
	err := run(func() (err error) {
		if s.connect, err = net.Listen("tcp", netip.AddrPortFrom(host, 0).String()); err != nil {
			return err
		}
		s.closers = append(s.closers, s.connect)
		if s.sink, err = net.Listen("tcp", netip.AddrPortFrom(host, 0).String()); err != nil {
			return err
		}
		s.closers = append(s.closers, s.sink)
		pc, err = net.ListenPacket("udp", netip.AddrPortFrom(host, dnsPort).String())
		return err
	})
	if err != nil {
		s.close()
		return nil, fmt.Errorf("servers on %s: %w", host, err)
	}
	s.dns = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(answer)}
	started := make(chan struct{})
	s.dns.NotifyStartedFunc = func() { close(started) }
	served := make(chan error, 1)
	go func() { served <- s.dns.ActivateAndServe() }()
	select {
	case <-started:
	case err := <-served:
		s.close()
		return nil, fmt.Errorf("DNS server on %s: %w", host, err)
	}
	go acceptAndClose(s.connect)
	go s.serveSink()
	return s, nil
}

// answer is the DNS server's fixed record.
func answer(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg).SetReply(q)
	if len(q.Question) == 1 {
		if rr, err := dns.NewRR(q.Question[0].Name + " 60 IN A 192.0.2.7"); err == nil {
			m.Answer = append(m.Answer, rr)
		}
	}
	_ = w.WriteMsg(m)
}

func acceptAndClose(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_ = c.Close()
	}
}

func (s *servers) serveSink() {
	for {
		c, err := s.sink.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			t := drain(c)
			if t.err == nil {
				_, t.err = io.WriteString(c, "ok\n")
			}
			s.transfers <- t
		}()
	}
}

// drain reads c to its end, timing its first and last byte.
func drain(c net.Conn) transfer {
	var t transfer
	buf := make([]byte, 256<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			now := time.Now()
			if t.bytes == 0 {
				t.first = now
			}
			t.last = now
			t.bytes += int64(n)
		}
		if errors.Is(err, io.EOF) {
			return t
		}
		if err != nil {
			t.err = err
			return t
		}
	}
}

func (s *servers) close() {
	if s.dns != nil {
		_ = s.dns.Shutdown()
	}
	for _, c := range s.closers {
		_ = c.Close()
	}
}

func port(ln net.Listener) uint16 { return uint16(ln.Addr().(*net.TCPAddr).Port) }
