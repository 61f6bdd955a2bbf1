package attempt

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
)

// NeverReached reports a transport error that proves the request never
// reached the server: dialing (including the name lookup) failed, or the TLS
// handshake did; or that the server never processed it: an HTTP/2 server
// refused its stream (see h2Unprocessed). Anything less certain, such as a
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

// Absent reports an error that shows the host not there: the connection
// was refused, no route led to it, its name did not resolve, or an HTTP/2
// server shutting down gracefully left the stream unprocessed. Errors that
// also come from a host sending too much away are not among them: a dial
// or handshake that timed out (a full accept queue), a refused stream (too
// many at once), a GOAWAY with an error code (ENHANCE_YOUR_CALM).
func Absent(err error) bool {
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return true
	case errors.As(err, &dns) && dns.IsNotFound:
		return true
	}
	return inChain(err, func(e error) bool { return e.Error() == h2GoAwayGraceful })
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

// h2StreamError has the fields of net/http's HTTP/2 stream error, which
// errors.As fills in through that error's As method.
type h2StreamError struct {
	StreamID uint32
	Code     uint32
	Cause    error
}

func (e h2StreamError) Error() string {
	return fmt.Sprintf("stream error: stream ID %d; code %d", e.StreamID, e.Code)
}

// h2RefusedStream is REFUSED_STREAM's error code (RFC 9113 §7).
const h2RefusedStream = 0x7

// The texts of the errors for a stream above a GOAWAY's last stream ID: a
// graceful GOAWAY (golang.org/x/net/http2's Transport hands it up after
// its own tries), and one with an error code on a connection's first
// stream (net/http's client hands it up at once).
const (
	h2GoAwayGraceful = "http2: Transport received Server's graceful shutdown GOAWAY"
	h2GoAwayFirst    = "http2: Transport received GOAWAY from server ErrCode:"
)

// h2Unprocessed reports an error that says the HTTP/2 server never
// processed the request.
//
// An HTTP/2 server can say that it did not process a request: it resets
// the stream with REFUSED_STREAM ("closed prior to any processing", RFC
// 9113 §8.7), or it sends GOAWAY with a last stream ID below the stream's
// (streams above it "have not been processed", §6.8). Such a request may
// be sent again whatever its method, and the transport sends it again as
// one that never reached the server, when it sees the error:
//
//   - REFUSED_STREAM: net/http's HTTP/2 client retries it by itself, seven
//     tries over about a minute of backoff when the body can be rewound,
//     and hands the stream error up when they run out. That error has an
//     As method which fills in any struct with the same fields
//     (h2StreamError here), so it is told without importing
//     golang.org/x/net.
//   - A connection's first stream above a GOAWAY that carries an error
//     code: net/http does not retry it, and says so in the error's text.
//   - A stream above a graceful GOAWAY: net/http's http.Transport sends it
//     again on a new connection by itself, with no bound but the request's
//     context, so the transport never sees it; golang.org/x/net/http2's
//     Transport, used directly, hands up the same text as net/http's
//     bundled client after its own seven tries.
//
// What it cannot tell: golang.org/x/net/http2's own StreamError (it has
// no As method, and its text would have to be parsed), a GOAWAY whose last
// stream ID covers the stream (the server may have processed it), and a
// body net/http could not rewind for its own retry (its error says so in
// text; such a body cannot be sent again by the transport either).
func h2Unprocessed(err error) bool {
	var se h2StreamError
	if errors.As(err, &se) && se.Code == h2RefusedStream {
		return true
	}
	return inChain(err, func(e error) bool {
		s := e.Error()
		return s == h2GoAwayGraceful || strings.HasPrefix(s, h2GoAwayFirst)
	})
}
