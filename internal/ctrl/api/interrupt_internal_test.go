package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestInterruptEndsAReadThatWaits: a handler waiting in a read of a
// request body the client keeps open gets an error once its interrupt is
// called, on HTTP/2 without TLS (a node session's protocol: Connect's
// bidirectional streams need HTTP/2) and on HTTP/1.1 in full duplex, and
// an interrupt after the handler returned does nothing.
func TestInterruptEndsAReadThatWaits(t *testing.T) {
	t.Run("h2c", func(t *testing.T) {
		testInterrupt(t, func(p *http.Protocols) { p.SetUnencryptedHTTP2(true) })
	})
	t.Run("http1", func(t *testing.T) {
		testInterrupt(t, func(p *http.Protocols) { p.SetHTTP1(true) })
	})
}

func testInterrupt(t *testing.T, protocol func(*http.Protocols)) {
	reading := make(chan struct{})
	readErr := make(chan error, 1)
	var late func()
	srv := httptest.NewUnstartedServer(interruptible(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		interrupt, err := interruptOf(r.Context())
		if err != nil {
			t.Error(err)
			return
		}
		late = interrupt
		rc := http.NewResponseController(w)
		// HTTP/1's server reads the whole body before the response's
		// header unless told not to; HTTP/2 needs nothing.
		_ = rc.EnableFullDuplex()
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
		close(reading)
		go interrupt() // from another goroutine, as when the session's ctx ends
		_, err = io.ReadAll(r.Body)
		readErr <- err
	})))
	srv.Config.Protocols = new(http.Protocols)
	protocol(srv.Config.Protocols)
	srv.Start()
	defer srv.Close()

	body, feed := io.Pipe()
	defer feed.Close()
	go func() { _, _ = feed.Write([]byte("first")) }() // the body stays open
	req, err := http.NewRequest(http.MethodPost, srv.URL, body)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{Protocols: srv.Config.Protocols}}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	<-reading
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("the read ended without an error, want the interrupt's")
		}
	case <-time.After(time.Minute): // a bound on a hang, not a measure
		t.Fatal("the read still waits after the interrupt")
	}
	_, _ = io.Copy(io.Discard, res.Body) // the handler returned
	late()                               // must neither panic nor block
}
