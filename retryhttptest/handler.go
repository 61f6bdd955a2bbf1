package retryhttptest

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Received records one request the Handler received, as returned by
// Handler.Requests. It is a copy: changing it does not affect the handler.
// It is a plain value, not safe for concurrent modification.
type Received struct {
	// N is the request number, 1-based, counted across the handler in the
	// order requests finished arriving. It selects Script.Steps[N-1].
	N int

	// Attempt is 1 for the first request with this method, URI,
	// Idempotency-Key and body hash, 2 for the second identical one, and
	// so on: the attempt number from the point of view of a retrying client.
	Attempt int

	// Method is the request method, such as "GET".
	Method string

	// URI is the request target as path and query, such as "/a?b=c".
	URI string

	// IdempotencyKey is the value of the Idempotency-Key header, or "".
	IdempotencyKey string

	// BodyHash is the hex SHA-256 of the request body (see BodyHash); an
	// empty body has the hash of no bytes.
	BodyHash string

	// BodySize is the number of request body bytes read.
	BodySize int64

	// Header is a copy of the request header.
	Header http.Header

	// At is when the handler finished reading the request.
	At time.Time
}

// Handler is an http.Handler that answers requests as its Script says and
// records what it received, so that tests can script a misbehaving server and
// then assert, for example, that a POST was received exactly once. Create one
// with NewHandler and serve it with NewServer or Start.
//
// The handler reads each request body in full (hashing it as it goes, never
// storing it) before it numbers, records and answers the request. A request
// whose body cannot be read in full (the client went away) is neither
// numbered nor recorded, and gets no answer.
//
// A Handler is safe for concurrent use: it may serve many requests at once
// while a test calls its accessor methods, which return copies.
type Handler struct {
	script  Script
	created time.Time
	now     func() time.Time // replaced in tests

	written   atomic.Int64
	abandoned atomic.Int64

	mu        sync.Mutex
	n         int
	first     time.Time
	received  []Received
	methods   map[string]int
	hashes    map[string]int
	keys      map[string]int
	identical map[string]int
}

// NewHandler returns a Handler that answers requests as s says. The Steps
// and ByAttempt slices are copied; the outage, if measured FromStart, starts
// now.
func NewHandler(s Script) *Handler {
	s.Steps = append([]Action(nil), s.Steps...)
	s.ByAttempt = append([]Action(nil), s.ByAttempt...)
	return &Handler{
		script:    s,
		created:   time.Now(),
		now:       time.Now,
		methods:   map[string]int{},
		hashes:    map[string]int{},
		keys:      map[string]int{},
		identical: map[string]int{},
	}
}

// ServeHTTP reads and hashes the request body, records the request, and
// answers it with the action the Script gives for its number.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sum := sha256.New()
	size, err := io.Copy(sum, r.Body)
	if err != nil {
		return // Not received in full: the client is gone.
	}
	a := h.receive(r, hex.EncodeToString(sum.Sum(nil)), size)
	h.respond(w, r, a)
}

// receive numbers and records the request and chooses its action, all under
// one lock, so numbering and the choice are consistent.
func (h *Handler) receive(r *http.Request, hash string, size int64) Action {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	h.n++
	if h.n == 1 {
		h.first = now
	}
	key := r.Header.Get("Idempotency-Key")
	uri := r.URL.RequestURI()
	id := r.Method + " " + uri + "\x00" + key + "\x00" + hash
	h.identical[id]++
	h.received = append(h.received, Received{
		N:              h.n,
		Attempt:        h.identical[id],
		Method:         r.Method,
		URI:            uri,
		IdempotencyKey: key,
		BodyHash:       hash,
		BodySize:       size,
		Header:         r.Header.Clone(),
		At:             now,
	})
	h.methods[r.Method]++
	h.hashes[hash]++
	if key != "" {
		h.keys[key]++
	}

	s := &h.script
	if o := s.Outage; o.For > 0 {
		start := h.first
		if o.FromStart {
			start = h.created
		}
		if now.Sub(start) < o.For {
			a := o.Action
			if a.Status == 0 {
				a.Status = http.StatusServiceUnavailable
			}
			return a
		}
	}
	if h.n <= len(s.Steps) {
		return s.Steps[h.n-1]
	}
	if k := h.identical[id]; k <= len(s.ByAttempt) {
		return s.ByAttempt[k-1]
	}
	return s.Then
}

// Count returns the number of requests received so far.
func (h *Handler) Count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// Methods returns a new map from request method to the number of requests
// received with it.
func (h *Handler) Methods() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return copyMap(h.methods)
}

// BodyHashes returns a new slice holding the hex SHA-256 of each request
// body (see BodyHash), one per request, in request-number order.
func (h *Handler) BodyHashes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := make([]string, len(h.received))
	for i, r := range h.received {
		s[i] = r.BodyHash
	}
	return s
}

// HashCounts returns a new map from body hash (see BodyHash) to the number of
// requests received with that body, so a test can assert that a payload
// arrived exactly once. Requests with empty bodies count under
// BodyHash(nil).
func (h *Handler) HashCounts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return copyMap(h.hashes)
}

// Keys returns a new map from Idempotency-Key header value to the number of
// requests received with it. Requests without the header, or with an empty
// value, are not counted.
func (h *Handler) Keys() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return copyMap(h.keys)
}

// Requests returns a new slice describing every request received, in
// request-number order. Each Header is a fresh copy.
func (h *Handler) Requests() []Received {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := make([]Received, len(h.received))
	for i, r := range h.received {
		r.Header = r.Header.Clone()
		s[i] = r
	}
	return s
}

// BytesWritten returns the number of response body bytes the handler has
// written so far, over all requests. Writing stops when the client goes away.
//
// It counts bytes the http.ResponseWriter accepted. Those pass through the
// server's and the kernel's socket buffers (often a few MiB on loopback)
// before the client reads them, so BytesWritten can exceed what the client
// actually read: it is an upper bound, useful to show that a server did not
// send a whole 1 GiB body, not a measure of what the client consumed; count
// that on the client side. Handlers may still be writing when it is called;
// for a final value, call it after the server's Close, which waits for
// handlers to return.
func (h *Handler) BytesWritten() int64 {
	return h.written.Load()
}

// Abandoned returns the number of responses the handler gave up on because
// the client went away: the request context was done during HeaderDelay,
// ChunkDelay or between chunks, or a write failed. Deliberate Faults are not
// counted. Like BytesWritten, it is final only after the server's Close.
func (h *Handler) Abandoned() int {
	return int(h.abandoned.Load())
}

func copyMap(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
