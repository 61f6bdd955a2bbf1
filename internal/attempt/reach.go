package attempt

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
)

// NeverReached reports a transport error that proves the request never
// reached the server: dialing (including the name lookup) failed, or the TLS
// handshake did; or that the server never processed it: an HTTP/2 server
// refused its stream (see h2unsent.go). Anything less certain, such as a
// reset that may have come after the request was written, counts as
// reached.
func NeverReached(err error) bool {
	var (
		op     *net.OpError
		dns    *net.DNSError
		alert  tls.AlertError
		record tls.RecordHeaderError
		ech    *tls.ECHRejectionError
	)
	switch {
	case errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect"):
		return true
	case errors.As(err, &dns), errors.As(err, &alert), errors.As(err, &record), errors.As(err, &ech):
		return true
	}
	// http.Transport's own handshake timeout is an unexported type.
	return strings.Contains(err.Error(), "TLS handshake timeout") || h2Unprocessed(err)
}

// CertificateRejected reports an error that a retry cannot mend: the
// server's certificate was rejected.
func CertificateRejected(err error) bool {
	var (
		verify    *tls.CertificateVerificationError
		authority x509.UnknownAuthorityError
		invalid   x509.CertificateInvalidError
		hostname  x509.HostnameError
	)
	return errors.As(err, &verify) || errors.As(err, &authority) ||
		errors.As(err, &invalid) || errors.As(err, &hostname)
}

// inChain reports whether f holds for err or an error it wraps.
func inChain(err error, f func(error) bool) bool {
	for err != nil {
		if f(err) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if inChain(e, f) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}
