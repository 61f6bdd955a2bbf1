package retryhttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp/internal/attempt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sharedReader is a request body whose GetBody rewinds the one reader and
// returns it again, as some SDKs' GetBody does for a *bytes.Reader.
type sharedReader struct {
	r *bytes.Reader
}

func (s *sharedReader) Read(p []byte) (int, error) { return s.r.Read(p) }
func (s *sharedReader) Close() error               { return nil }

func (s *sharedReader) getBody() (io.ReadCloser, error) {
	if _, err := s.r.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return s, nil
}

// A server that answers 503 before reading an upload, then accepts the
// retry: the retry must not share its body with the first attempt's write,
// which may still be reading it. Every body the server accepts is the
// original, byte for byte, with a known length and chunked.
func TestBodySharedReaderEarlyAnswer(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	payload := make([]byte, 8<<20)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(payload) // never fails
	want := sha256.Sum256(payload)

	for _, chunked := range []bool{false, true} {
		name := map[bool]string{false: "known length", true: "chunked"}[chunked]
		t.Run(name, func(t *testing.T) {
			var (
				mu       sync.Mutex
				accepted [][sha256.Size]byte
				lengths  []int
				calls    atomic.Int64
			)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1)%2 == 1 {
					// Odd attempts: answer at once, body unread.
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				h := sha256.New()
				n, err := io.Copy(h, r.Body)
				if err != nil {
					return // the framing broke: net/http saw an incomplete request
				}
				mu.Lock()
				accepted = append(accepted, [sha256.Size]byte(h.Sum(nil)))
				lengths = append(lengths, int(n))
				mu.Unlock()
				w.WriteHeader(http.StatusOK)
			}))
			defer srv.Close()
			tr := New(nil, WithBudget(nil), WithBreaker(nil), WithPolicy(immediate{}), WithMaxAttempts(6))
			defer tr.CloseIdleConnections()

			const rounds = 3
			for range rounds {
				calls.Store(0)
				body := &sharedReader{r: bytes.NewReader(payload)}
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL, body)
				require.NoError(t, err)
				req.GetBody = body.getBody
				req.ContentLength = int64(len(payload))
				if chunked {
					req.ContentLength = -1
				}
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				readBody(t, resp)
				assert.Equal(t, http.StatusOK, resp.StatusCode)
			}
			mu.Lock()
			defer mu.Unlock()
			require.NotEmpty(t, accepted, "no body accepted")
			for i := range accepted {
				assert.Equal(t, want, accepted[i], "accepted body %d: %d of %d bytes, or other bytes", i, lengths[i], len(payload))
			}
		})
	}
}

// A nil response Body from next is an empty body: no panic when it is
// drained, returned, or wrapped for an attempt timeout.
func TestBodyNilResponseBody(t *testing.T) {
	nilBody := func(*http.Request) io.ReadCloser { return nil }
	cases := []struct {
		name      string
		script    []reply
		opts      []Option
		wantCalls int
		wantCode  int
	}{
		{"retryable status, then 200", []reply{{status: 503, newBody: nilBody}, {status: 200, newBody: nilBody}}, nil, 2, 200},
		{"last attempt", []reply{{status: 503, newBody: nilBody}}, []Option{WithMaxAttempts(2)}, 2, 503},
		{"attempt timeout", []reply{{status: 503, newBody: nilBody}, {status: 200, newBody: nilBody}}, []Option{WithAttemptTimeout(time.Second)}, 2, 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				next := newNext(c.script...)
				resp, err := newT(next, c.opts...).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
				require.NoError(t, err)
				assert.Equal(t, c.wantCalls, next.calls())
				assert.Equal(t, c.wantCode, resp.StatusCode)
				require.NotNil(t, resp.Body)
				assert.Empty(t, readBody(t, resp))
			})
		})
	}
}

// stallBody is an error body that sends a few bytes, then stalls until it is
// closed.
type stallBody struct {
	sent   bool
	closed chan struct{}
	once   sync.Once
}

func newStallBody() *stallBody { return &stallBody{closed: make(chan struct{})} }

func (b *stallBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, "error"), nil
	}
	<-b.closed
	return 0, io.ErrClosedPipe
}

func (b *stallBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

// A failed response whose body stalls holds the retry for at most
// attempt.DrainTimeout, and never past the caller's deadline; a longer delay
// overlaps the drain rather than adding to it.
func TestBodyDrainBoundedInTime(t *testing.T) {
	cases := []struct {
		name     string
		policy   Policy
		deadline time.Duration // 0: none
		wantAt   time.Duration // when the retry leaves, or the call returns
		wantErr  bool
	}{
		{"no delay: the drain's bound", immediate{}, 0, attempt.DrainTimeout, false},
		{"delay longer than the bound", Exponential{Base: 300 * time.Millisecond}, 0, 300 * time.Millisecond, false},
		{"deadline before the bound", immediate{}, 60 * time.Millisecond, 60 * time.Millisecond, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				stall := newStallBody()
				next := newNext(
					reply{status: 503, newBody: func(*http.Request) io.ReadCloser { return stall }},
					reply{status: 200},
				)
				ctx := t.Context()
				if c.deadline > 0 {
					var cancel func()
					ctx, cancel = context.WithTimeout(ctx, c.deadline)
					defer cancel()
				}
				start := time.Now()
				resp, err := newT(next, WithPolicy(c.policy)).RoundTrip(newReq(ctx, http.MethodGet, nil))
				elapsed := time.Since(start)
				select {
				case <-stall.closed:
				default:
					t.Error("the stalled body was not closed")
				}
				if c.wantErr {
					require.Error(t, err)
					assert.Equal(t, c.wantAt, elapsed, "returned at")
					assert.Equal(t, 1, next.calls())
					return
				}
				require.NoError(t, err)
				readBody(t, resp)
				reqs := next.requests()
				require.Len(t, reqs, 2)
				assert.Equal(t, c.wantAt, reqs[1].at.Sub(start), "retry sent at")
			})
		})
	}
}
