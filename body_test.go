package retryhttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

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
// drainTimeout, and never past the caller's deadline; a longer delay
// overlaps the drain rather than adding to it.
func TestBodyDrainBoundedInTime(t *testing.T) {
	cases := []struct {
		name     string
		policy   Policy
		deadline time.Duration // 0: none
		wantAt   time.Duration // when the retry leaves, or the call returns
		wantErr  bool
	}{
		{"no delay: the drain's bound", immediate{}, 0, drainTimeout, false},
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

// The GetBody functions that http.NewRequest sets return a new reader each
// time, so their bodies are sent as they are; any other GetBody's bodies are
// tracked, because it may hand out one shared reader.
func TestBodySnapshotGetBody(t *testing.T) {
	for _, body := range []io.Reader{bytes.NewBufferString("b"), bytes.NewReader([]byte("b")), strings.NewReader("b")} {
		req, err := http.NewRequest(http.MethodPut, testURL, body)
		require.NoError(t, err)
		assert.True(t, snapshotGetBody(req.GetBody), "%T", body)
	}
	shared := &sharedReader{r: bytes.NewReader([]byte("b"))}
	assert.False(t, snapshotGetBody(shared.getBody), "a method value")
	assert.False(t, snapshotGetBody(func() (io.ReadCloser, error) { return shared, nil }), "a closure")
}

// A next RoundTripper that replays a tracked body itself, through the
// attempt's GetBody, gets a tracked body too; once the transport has moved
// on to the next attempt it gets an error instead.
func TestBodyInnerGetBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := &sharedReader{r: bytes.NewReader([]byte("payload"))}
		var inner []string
		var first *http.Request
		next := newNext(reply{status: 503, before: func(req *http.Request) {
			first = req
			b, err := req.GetBody()
			require.NoError(t, err)
			got, _ := io.ReadAll(b)
			inner = append(inner, string(got))
			b.Close()
		}}, reply{status: 200})
		req := newReq(t.Context(), http.MethodPut, shared)
		req.GetBody = shared.getBody
		resp, err := newT(next, WithPolicy(immediate{})).RoundTrip(req)
		require.NoError(t, err)
		readBody(t, resp)
		assert.Equal(t, []string{"payload"}, inner)
		_, err = first.GetBody()
		assert.ErrorIs(t, err, errBodyReleased, "a GetBody of an attempt the transport has left")
	})
}

// A 101 response's body stays writable through the attempt timeout's
// wrapper.
func TestBodyUpgradeWritable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wrote bytes.Buffer
		next := newNext(reply{status: http.StatusSwitchingProtocols, newBody: func(*http.Request) io.ReadCloser {
			return struct {
				io.Reader
				io.Writer
				io.Closer
			}{strings.NewReader(""), &wrote, io.NopCloser(nil)}
		}})
		resp, err := newT(next, WithAttemptTimeout(time.Second)).RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.NoError(t, err)
		w, ok := resp.Body.(io.Writer)
		require.True(t, ok, "the body is no longer a writer")
		_, err = w.Write([]byte("ping"))
		require.NoError(t, err)
		assert.Equal(t, "ping", wrote.String())
		resp.Body.Close()
	})
}
