package retryhttptest

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"
)

// Script tells a Handler how to answer each request. Requests are numbered
// 1, 2, 3, … in the order the handler finishes reading them (see Handler), and
// request N, the k-th identical one (see Received.Attempt), is answered with,
// in order of precedence:
//
//  1. Outage.Action, if the request arrives during the outage window;
//  2. Steps[N-1], if N <= len(Steps);
//  3. ByAttempt[k-1], if k <= len(ByAttempt);
//  4. Then.
//
// Requests answered by the outage still count towards N and k, so they use
// up steps and attempts. The zero Script answers every request with 200 OK and the body "OK\n".
//
// A Script is a plain value, safe for concurrent use as long as nobody
// modifies it. NewHandler copies the Steps slice, but the Body and Header of
// each Action are shared and must not be modified once the handler is in use.
type Script struct {
	// Steps holds the actions for the first len(Steps) requests: request N
	// gets Steps[N-1]. Use Repeat to build runs of identical steps.
	Steps []Action

	// ByAttempt holds actions chosen by attempt rather than by request
	// number: the k-th identical request (same method, URI, Idempotency-Key
	// and body; see Received.Attempt) gets ByAttempt[k-1], and identical
	// requests after that get Then. With unique bodies it scripts "every
	// delivery fails twice, then succeeds" for a client that sends many
	// requests at once, whose request numbers interleave. Steps, matched by
	// request number, take precedence while they last.
	ByAttempt []Action

	// Then is the action for every request after Steps (and ByAttempt)
	// run out. The zero Action answers 200 OK.
	Then Action

	// Outage, if Outage.For is positive, makes the server "down" for a
	// period of time, whatever the request number.
	Outage Outage
}

// Outage describes a period during which every request gets the same
// failing answer, to script "down for 2 seconds" rather than "the first 3
// requests fail". The zero Outage means no outage. Like Script, it is a plain
// value, safe for concurrent use as long as nobody modifies it.
type Outage struct {
	// For is how long the outage lasts. Zero or negative means no outage.
	For time.Duration

	// FromStart measures the outage from the moment NewHandler was called.
	// By default it is measured from the arrival of the first request, so a
	// test does not race against its own setup.
	FromStart bool

	// Action is the answer during the outage. Unlike elsewhere, a zero
	// Action.Status here means 503 Service Unavailable.
	Action Action
}

// Fault selects a way for the handler to break the connection instead of
// completing a normal response. The zero value, NoFault, completes the
// response. A Fault is an integer and safe for concurrent use. Faults need a connection that can be hijacked (HTTP/1.x, which is
// what NewServer and Start serve); otherwise the handler aborts the request
// with http.ErrAbortHandler, which closes the connection without the reset.
type Fault int

const (
	// NoFault completes the response normally.
	NoFault Fault = iota

	// ResetAfterRequest reads the whole request, counts it, waits
	// HeaderDelay and then resets the TCP connection (SO_LINGER 0 and
	// close, which sends an RST) without writing any response byte. The
	// client sees an error such as "connection reset by peer" or EOF.
	ResetAfterRequest

	// ResetMidBody writes the status line and headers, including a
	// Content-Length for the whole body, then the first half of the body
	// (rounded down), flushes, and resets the TCP connection. The client
	// gets a response and then an error while reading its body. Bytes the
	// kernel has not yet sent when the reset happens are discarded, so the
	// client can receive less than half; on loopback it usually receives
	// the whole half.
	ResetMidBody
)

// String returns the name of the fault, such as "ResetMidBody".
func (f Fault) String() string {
	switch f {
	case NoFault:
		return "NoFault"
	case ResetAfterRequest:
		return "ResetAfterRequest"
	case ResetMidBody:
		return "ResetMidBody"
	}
	return "Fault(" + strconv.Itoa(int(f)) + ")"
}

// Action describes how the handler answers one request. The zero Action
// answers 200 OK with the body "OK\n" at once. Actions are plain values and
// safe to share between goroutines as long as nobody modifies them.
type Action struct {
	// Status is the response status code. Zero means 200 OK (but see
	// Outage.Action).
	Status int

	// Header holds extra response headers, added to the response before
	// Retry-After and Content-Length are set.
	Header http.Header

	// Body is the response body. If Body is nil and BodySize is zero, the
	// body is the status text and a newline, such as "Service
	// Unavailable\n". A non-nil empty slice sends an empty body.
	Body []byte

	// BodySize, if positive, replaces Body with a generated body of this
	// many 'x' bytes. It is produced chunk by chunk as it is written, so
	// even a 1 GiB body is never held in memory, and writing stops as soon
	// as the client goes away. See Handler.BytesWritten.
	BodySize int64

	// RetryAfter, if positive, sets the Retry-After header, by default as
	// delta-seconds rounded up to a whole number of seconds ("2"). To send
	// "Retry-After: 0" or a malformed value, use Header instead.
	RetryAfter time.Duration

	// RetryAfterDate sends RetryAfter as an HTTP-date instead: the time of
	// the response plus RetryAfter, rounded up to a whole second, such as
	// "Mon, 02 Jan 2006 15:04:05 GMT".
	RetryAfterDate bool

	// HeaderDelay makes the handler wait this long before writing the
	// status line and headers (or before acting on Fault), to script a slow
	// server. The wait ends early, and the response is abandoned, when the
	// request's context is done, for example because the client timed out
	// and closed the connection.
	HeaderDelay time.Duration

	// ChunkSize is how many body bytes each write carries. Zero or
	// negative means 32 KiB. Every chunk is flushed to the connection.
	ChunkSize int

	// ChunkDelay, if positive, makes a slow body: the headers are flushed
	// at once and the handler pauses for ChunkDelay before each chunk. Like
	// HeaderDelay, a pause ends early when the client goes away.
	ChunkDelay time.Duration

	// Fault, if not NoFault, breaks the connection instead of completing
	// the response.
	Fault Fault
}

// Repeat returns a slice of n copies of a, for building Script.Steps such as
// "3 failures then success": Script{Steps: Repeat(3, Action{Status: 503})}.
// It returns nil if n <= 0.
func Repeat(n int, a Action) []Action {
	if n <= 0 {
		return nil
	}
	s := make([]Action, n)
	for i := range s {
		s[i] = a
	}
	return s
}

// FailN returns a Script whose first n requests are answered with status and
// every later request with 200 OK. It is shorthand for
// Script{Steps: Repeat(n, Action{Status: status})}.
func FailN(n, status int) Script {
	return Script{Steps: Repeat(n, Action{Status: status})}
}

// BodyHash returns the lower-case hex SHA-256 of b, the form used by
// Handler.BodyHashes, Handler.HashCounts and Received.BodyHash, so a test can
// write h.HashCounts()[retryhttptest.BodyHash(payload)].
func BodyHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
