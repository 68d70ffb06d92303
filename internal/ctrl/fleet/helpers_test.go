package fleet_test

import "net/http"

// httpClient speaks cleartext HTTP/2, as node sessions need.
func httpClient() *http.Client {
	t := &http.Transport{}
	t.Protocols = new(http.Protocols)
	t.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: t}
}
