package retryhttp

import (
	"net/http"
	"strings"

	"github.com/retryhttp/retryhttp/internal/attempt"
	"github.com/retryhttp/retryhttp/internal/perkey"
)

// reach says how far an attempt got.
type reach uint8

const (
	// reached: the request reached the server, or may have: a response, or
	// an error after the connection was made.
	reached reach = iota
	// notReached: the request provably never reached the server (the dial
	// was refused, the name did not resolve, the TLS handshake failed), so
	// sending it again cannot apply it twice, whatever its method.
	notReached
	// notSent: the request itself is at fault and was never sent as it
	// stands (a malformed URL or header, an unsupported scheme): the same
	// request fails the same way every time, and the host is not to blame.
	notSent
)

// verdict is what one attempt's outcome says: how far it got, whether it
// is worth retrying, and what it tells the host's circuit.
type verdict struct {
	reach reach
	// retry reports a retryable outcome. Whether a retry is then made is
	// the decision's business (idempotency, attempts, circuit, deadline,
	// budget).
	retry bool
	// why is the reason to stop when retry is false and the outcome is not
	// a success: ReasonNotRetryable or ReasonContextDone.
	why  Reason
	host perkey.Kind // what the key's circuit is told
}

// success reports an outcome that ends the request without a failure: a
// response that is not retryable.
func (v verdict) success() bool { return !v.retry && v.why == ReasonNone }

// classify judges the outcome of one attempt of req: the response, or the
// error, that the next RoundTripper returned. It reads nothing but its
// arguments (and the request's context), in the manner of net/http's
// shouldRetryRequest; the loop around it acts on what it says.
func classify(req *http.Request, resp *http.Response, err error, retryIf func(*http.Response, error) bool) verdict {
	if err != nil {
		switch {
		case req.Context().Err() != nil:
			// The caller's context ended: its own error is never retried,
			// and says nothing about the host.
			return verdict{why: ReasonContextDone}
		case callerMistake(req, err):
			// Nothing reached the host; the same request fails the same way.
			return verdict{reach: notSent, why: ReasonNotRetryable}
		case attempt.CertificateRejected(err):
			// The same certificate fails the same way; a host with a bad
			// certificate is misconfigured, not overloaded, so its circuit
			// is not told.
			return verdict{why: ReasonNotRetryable}
		case strings.Contains(err.Error(), "server response headers exceeded"):
			// More header bytes than the caller's http.Transport accepts
			// (MaxResponseHeaderBytes): the same response is refused the
			// same way, after reading as much again.
			return verdict{why: ReasonNotRetryable}
		}
	}
	v := verdict{retry: retryIf(resp, err)}
	if err != nil && attempt.NeverReached(err) {
		v.reach = notReached
	}
	switch {
	case v.retry:
		v.host = perkey.Failure
	case err == nil:
		// The host answered: a success to its circuit, whatever the status.
		v.host = perkey.Success
	default:
		// A transport error that WithRetryIf rejects tells nothing of the
		// host.
		v.why = ReasonNotRetryable
	}
	return v
}

// callerMistake reports an error that the request itself caused before
// anything reached the host. net/http reports these as plain errors, so the
// request is checked here against net/http's own rules (the ones
// http.Transport applies before it dials); this runs only after an attempt
// failed, never on the success path.
func callerMistake(req *http.Request, err error) bool {
	u := req.URL
	if u == nil || u.Host == "" || req.Header == nil {
		return true
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		// A next RoundTripper may serve other schemes; only its own word
		// that it does not makes it the caller's mistake.
		return strings.Contains(err.Error(), "unsupported protocol scheme")
	}
	if req.Method != "" && !validToken(req.Method) {
		return true
	}
	if !validHeader(req.Header) || !validHeader(req.Trailer) || hasCTL(u.RequestURI()) {
		return true
	}
	// A body shorter or longer than its declared ContentLength: net/http
	// refuses to finish writing it, and it will be just as wrong next time.
	return req.ContentLength > 0 && strings.Contains(err.Error(), "with Body length")
}

// validHeader applies net/http's rules for outgoing header fields: names
// are tokens, values hold no control character other than a tab.
func validHeader(h http.Header) bool {
	for k, vv := range h {
		if !validToken(k) {
			return false
		}
		for _, v := range vv {
			for i := 0; i < len(v); i++ {
				if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
					return false
				}
			}
		}
	}
	return true
}

// validToken reports whether s is a token (RFC 9110 §5.6.2), as header
// names and methods must be.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] == 0x7f {
			return true
		}
	}
	return false
}
