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
// bidirectional streams need HTTP/2), and an interrupt after the handler
// returned does nothing.
func TestInterruptEndsAReadThatWaits(t *testing.T) {
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
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		close(reading)
		go interrupt() // from another goroutine, as when the session's ctx ends
		_, err = io.ReadAll(r.Body)
		readErr <- err
	})))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
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
