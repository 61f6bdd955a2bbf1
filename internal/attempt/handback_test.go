package attempt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// watchedReader is a caller's shared body whose GetBody rewinds it, as
// openai-go's does for a *bytes.Reader; it counts the reads made after the
// test has marked the request as returned.
type watchedReader struct {
	r        *bytes.Reader
	returned atomic.Bool
	late     atomic.Int64 // reads after returned was set
}

func (w *watchedReader) Read(p []byte) (int, error) {
	if w.returned.Load() {
		w.late.Add(1)
	}
	return w.r.Read(p)
}

func (w *watchedReader) Close() error { return nil }

func (w *watchedReader) getBody() (io.ReadCloser, error) {
	_, err := w.r.Seek(0, io.SeekStart)
	return w, err
}

// earlyNext answers before it has finished writing the request body, as
// http.Transport does when a server answers an upload early: it reads one
// chunk, then hands the rest of the write to a goroutine, and returns its
// response or error at once. The goroutine waits for resume to be closed
// (so that the write is still going when RoundTrip returns, however the
// goroutines are scheduled), then reads until a read fails, and sends the
// error on wrote.
type earlyNext struct {
	status int
	err    error
	resume chan struct{}
	wrote  chan error
	// closeWaits: the response body's Close waits for the write to end,
	// as HTTP/2's does; ended is closed when it has.
	closeWaits bool
	ended      chan struct{}
}

func newEarlyNext(status int, err error) *earlyNext {
	return &earlyNext{status: status, err: err, resume: make(chan struct{}), wrote: make(chan error, 1), ended: make(chan struct{})}
}

// waitingBody is a response body whose Close waits for ended.
type waitingBody struct {
	io.Reader
	ended <-chan struct{}
}

func (b waitingBody) Close() error {
	<-b.ended
	return nil
}

func (n *earlyNext) RoundTrip(req *http.Request) (*http.Response, error) {
	buf := make([]byte, 1024)
	if _, err := req.Body.Read(buf); err != nil {
		return nil, err
	}
	go func() {
		<-n.resume
		for {
			if _, err := req.Body.Read(buf); err != nil {
				req.Body.Close()
				close(n.ended)
				n.wrote <- err
				return
			}
		}
	}()
	if n.err != nil {
		return nil, n.err
	}
	page := bytes.NewReader([]byte("error page"))
	if n.closeWaits {
		return newResponse(req, n.status, waitingBody{page, n.ended}), nil
	}
	return newResponse(req, n.status, io.NopCloser(page)), nil
}

// sendOnce sends req's first attempt through next, as the transport does
// with retries off, and returns its Body for the hand-back.
func sendOnce(req *http.Request, next http.RoundTripper) (*Body, *http.Response, error) {
	b := new(Body)
	b.First(req, 1, 0)
	resp, err := Send(next, b.Take(), 0, req.Context())
	return b, resp, err
}

// newResponse is a response of next to req.
func newResponse(req *http.Request, status int, body io.ReadCloser) *http.Response {
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: body, ContentLength: -1, Request: req}
}

// newReq is a request to a test host with body, or none.
func newReq(ctx context.Context, method string, body io.Reader) *http.Request {
	req, err := http.NewRequestWithContext(ctx, method, "http://example.test/", body)
	if err != nil {
		panic(err)
	}
	return req
}

// A failure handed back while the next RoundTripper is still writing the
// request body: the caller's body is never read after it is handed back;
// the write ends with a read error once the response handed back has been
// read to its end (so that an HTTP/1 connection is not closed under a body
// not yet read), or at once when there is no response; the response body
// is intact. A success, never handed back, is left alone: the write goes
// on reading.
func TestHandBackFailureNotReadAgain(t *testing.T) {
	cases := []struct {
		name     string
		status   int
		err      error
		handBack bool
	}{
		{"503", 503, nil, true},
		{"an error", 0, errors.New("read tcp: connection reset by peer"), true},
		{"a 200 is left alone", 200, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				body := &watchedReader{r: bytes.NewReader(bytes.Repeat([]byte("u"), 1<<20))}
				next := newEarlyNext(c.status, c.err)
				req := newReq(t.Context(), http.MethodPut, body)
				req.GetBody = body.getBody

				b, resp, err := sendOnce(req, next)
				if c.handBack {
					resp = b.HandBack(resp)
				}
				body.returned.Store(true)
				close(next.resume)
				if !c.handBack {
					require.NoError(t, err)
					synctest.Wait()
					assert.NotZero(t, body.late.Load(), "the write of a success goes on after RoundTrip returns")
					assert.Equal(t, io.EOF, <-next.wrote, "and reads the body to its end")
					resp.Body.Close()
					return
				}
				// The caller rewinds its reader at once, as an SDK retrying
				// by itself does; under -race, a write still reading the
				// reader would be reported.
				_, _ = body.getBody()
				synctest.Wait()
				if c.err != nil {
					assert.Nil(t, resp)
					assert.ErrorIs(t, err, c.err)
					assert.ErrorIs(t, <-next.wrote, ErrBodyReleased, "with no response, the write fails at once")
				} else {
					require.NoError(t, err)
					assert.Equal(t, c.status, resp.StatusCode)
					select {
					case werr := <-next.wrote:
						t.Fatalf("the write ended (%v) before the response handed back was read", werr)
					default:
					}
					got, err := io.ReadAll(resp.Body)
					require.NoError(t, err)
					resp.Body.Close()
					assert.Equal(t, "error page", string(got), "the response handed back is intact")
					assert.ErrorIs(t, <-next.wrote, ErrBodyReleased, "once it is read, the write fails")
				}
				assert.Zero(t, body.late.Load(), "the caller's body is not read after RoundTrip returns a failure")
			})
		})
	}
}

// A response handed back while its write goes on, and never read: closing
// it ends the write; so does the end of the request's context.
func TestHandBackParkedWriteEnds(t *testing.T) {
	for _, end := range []string{"close", "close, HTTP/2", "context", "limit"} {
		t.Run(end, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				body := &watchedReader{r: bytes.NewReader(bytes.Repeat([]byte("u"), 1<<20))}
				next := newEarlyNext(503, nil)
				next.closeWaits = end == "close, HTTP/2"
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				req := newReq(ctx, http.MethodPut, body)
				req.GetBody = body.getBody
				b, resp, err := sendOnce(req, next)
				require.NoError(t, err)
				resp = b.HandBack(resp)
				body.returned.Store(true)
				close(next.resume)
				synctest.Wait()
				select {
				case <-next.wrote:
					t.Fatal("the write ended before the response was done with")
				default:
				}
				parked := time.Now()
				switch end {
				case "close", "close, HTTP/2":
					// HTTP/2's Close waits for the write: the park ends
					// first, or Close would never return.
					resp.Body.Close()
				case "context":
					cancel()
				case "limit":
					// Neither: a server that reads the whole upload before
					// it ends its response would never let the caller
					// finish reading it.
				}
				werr := <-next.wrote
				if end == "limit" {
					assert.Equal(t, ParkLimit, time.Since(parked), "the write waits ParkLimit, no more")
				}
				assert.True(t, errors.Is(werr, ErrBodyReleased), "the write fails: %v", werr)
				assert.Zero(t, body.late.Load(), "the caller's body is not read after RoundTrip returns")
				resp.Body.Close()
			})
		})
	}
}

// Over a real HTTP/1.1 connection, a server that answers 503 at once and
// then reads the whole upload before it ends its response (full duplex,
// as http.ResponseController.EnableFullDuplex allows): the caller reading
// the 503 handed back is not deadlocked with the parked write. The park
// ends within ParkLimit, the write fails, the server sees the upload cut,
// and the caller's read ends; the caller's body is never read after
// RoundTrip returns.
func TestHandBackFullDuplexHTTP1(t *testing.T) {
	received := make(chan int64, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		require.NoError(t, rc.EnableFullDuplex())
		w.WriteHeader(http.StatusServiceUnavailable)
		require.NoError(t, rc.Flush())
		n, _ := io.Copy(io.Discard, r.Body)
		received <- n
	}))
	defer srv.Close()
	const size = 64 << 20 // more than the loopback socket buffers hold
	body := &watchedReader{r: bytes.NewReader(make([]byte, size))}
	next := &http.Transport{}
	defer next.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPut, srv.URL, body)
	require.NoError(t, err)
	req.GetBody = body.getBody
	req.ContentLength = size

	b, resp, err := sendOnce(req, next)
	require.NoError(t, err)
	resp = b.HandBack(resp)
	defer resp.Body.Close() // before srv.Close, which waits for the handler
	body.returned.Store(true)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(resp.Body)
		read <- err
	}()
	bound := time.NewTimer(30 * time.Second) // a deadlock's detector, not a wait
	defer bound.Stop()
	select {
	case <-read:
	case <-bound.C:
		t.Fatal("the caller's read of the 503 never ended: it waits for the server, which waits for the parked write")
	}
	assert.Less(t, <-received, int64(size), "the server sees the upload cut")
	assert.Zero(t, body.late.Load(), "the caller's body is not read after RoundTrip returns")
}
