package egress

import (
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
)

// Bounds of the strings a spec carries. 255 is what SOCKS5's
// username/password authentication (RFC 1929) can send; a DNS name is at
// most 253 characters.
const (
	maxCredential = 255
	maxHostName   = 253
	maxURL        = 2048
)

// checkHostPort validates host:port with a host name or IP address (IPv6 in
// brackets, no zone) and a port from 1 to 65535.
func checkHostPort(field, v string) error {
	if v == "" {
		return apierr.Invalid(field, "is required: host:port")
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return apierr.Invalid(field, "%q is not host:port (an IPv6 address goes in brackets)", v)
	}
	if err := checkHost(field, host); err != nil {
		return err
	}
	return checkPort(field, port)
}

func checkPort(field, port string) error {
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return apierr.Invalid(field, "port %q must be a number from 1 to 65535", port)
	}
	return nil
}

// checkHost accepts an IP address without zone or a DNS host name.
func checkHost(field, host string) error {
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return apierr.Invalid(field, "address %q has a zone, which means nothing off this host", host)
		}
		return nil
	}
	if !validHostName(host) {
		return apierr.Invalid(field, "%q is neither an IP address nor a host name (labels of 1 to 63 letters, digits and '-', at most 253 characters)", host)
	}
	return nil
}

func validHostName(h string) bool {
	if h == "" || len(h) > maxHostName {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return false
			}
		}
	}
	return true
}

// checkServerName validates a TLS server name: a host name (what SNI
// carries) or an IP address the certificate must name.
func checkServerName(field, v string) error {
	if _, err := netip.ParseAddr(v); err == nil {
		return checkHost(field, v)
	}
	if !validHostName(v) {
		return apierr.Invalid(field, "%q is not a host name (labels of 1 to 63 letters, digits and '-', at most 253 characters)", v)
	}
	return nil
}

func checkCredential(field, v string) error {
	if len(v) > maxCredential {
		return apierr.Invalid(field, "is %d bytes; at most %d are allowed", len(v), maxCredential)
	}
	if strings.ContainsFunc(v, unicode.IsControl) {
		return apierr.Invalid(field, "must not contain control characters")
	}
	return nil
}

// checkEgressSpec validates an EgressSpec at field. Errors never quote the
// password.
func checkEgressSpec(field string, s *ctrlv1.EgressSpec) error {
	if s == nil {
		return apierr.Invalid(field, "is required")
	}
	switch s.GetProtocol() {
	case ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, ctrlv1.EgressProtocol_EGRESS_PROTOCOL_HTTP_CONNECT:
	case ctrlv1.EgressProtocol_EGRESS_PROTOCOL_UNSPECIFIED:
		return apierr.Invalid(field+".protocol", "is required: SOCKS5 or HTTP_CONNECT")
	default:
		return apierr.Invalid(field+".protocol", "%d is not an EgressProtocol", s.GetProtocol())
	}
	if err := checkHostPort(field+".endpoint", s.GetEndpoint()); err != nil {
		return err
	}
	if err := checkTLS(field, s.GetTls(), s.GetServerName()); err != nil {
		return err
	}
	if err := checkCredential(field+".username", s.GetUsername()); err != nil {
		return err
	}
	if err := checkCredential(field+".password", s.GetPassword()); err != nil {
		return err
	}
	if s.GetPassword() != "" && s.GetUsername() == "" {
		return apierr.Invalid(field+".password", "needs a username")
	}
	http := s.GetProtocol() == ctrlv1.EgressProtocol_EGRESS_PROTOCOL_HTTP_CONNECT
	if http && strings.Contains(s.GetUsername(), ":") {
		// HTTP Basic authentication (RFC 7617) separates the two at the
		// first colon.
		return apierr.Invalid(field+".username", "must not contain ':' for HTTP_CONNECT")
	}
	if http && s.GetUdpEnabled() {
		return apierr.Invalid(field+".udp_enabled", "is SOCKS5 only: HTTP_CONNECT carries no UDP")
	}
	return nil
}

// checkTLS: a server name only means something when TLS verifies it.
func checkTLS(field string, tls bool, serverName string) error {
	if serverName == "" {
		return nil
	}
	if !tls {
		return apierr.Invalid(field+".server_name", "is only used with TLS: set tls or leave server_name empty")
	}
	return checkServerName(field+".server_name", serverName)
}

// checkResolverSpec validates a ResolverSpec at field.
func checkResolverSpec(field string, s *ctrlv1.ResolverSpec) error {
	if s == nil {
		return apierr.Invalid(field, "is required")
	}
	p := s.GetProtocol()
	switch p {
	case ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP, ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP,
		ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TLS:
		if s.GetUrl() != "" {
			return apierr.Invalid(field+".url", "is for HTTPS only; %s takes address", p)
		}
		if err := checkHostPort(field+".address", s.GetAddress()); err != nil {
			return err
		}
	case ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_HTTPS:
		if s.GetAddress() != "" {
			return apierr.Invalid(field+".address", "is not for HTTPS, which takes url")
		}
		if err := checkDoHURL(field+".url", s.GetUrl()); err != nil {
			return err
		}
	case ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UNSPECIFIED:
		return apierr.Invalid(field+".protocol", "is required: UDP, TCP, TLS or HTTPS")
	default:
		return apierr.Invalid(field+".protocol", "%d is not a ResolverProtocol", p)
	}
	tls := p == ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TLS || p == ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_HTTPS
	return checkTLS(field, tls, s.GetServerName())
}

// checkDoHURL accepts an absolute https:// URL with a host, without user
// information or fragment (RFC 8484 URI templates are not taken: queries
// are POSTed to the URL as given).
func checkDoHURL(field, v string) error {
	if v == "" {
		return apierr.Invalid(field, "is required for HTTPS: an https:// URL")
	}
	if len(v) > maxURL {
		return apierr.Invalid(field, "is %d bytes; at most %d are allowed", len(v), maxURL)
	}
	u, err := url.Parse(v)
	switch {
	case err != nil:
		return apierr.Invalid(field, "is not a URL: %v", err)
	case u.Scheme != "https":
		return apierr.Invalid(field, "must be an https:// URL")
	case u.User != nil:
		return apierr.Invalid(field, "must not carry user information")
	case u.Fragment != "" || strings.Contains(v, "#"):
		return apierr.Invalid(field, "must not have a fragment")
	case u.Hostname() == "":
		return apierr.Invalid(field, "has no host")
	}
	if err := checkHost(field, u.Hostname()); err != nil {
		return err
	}
	if p := u.Port(); p != "" {
		return checkPort(field, p)
	}
	return nil
}
