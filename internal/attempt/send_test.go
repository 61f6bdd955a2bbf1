package attempt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rtFunc is a next RoundTripper made of a function.
type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// closeCounter is a response body that counts its Close calls.
type closeCounter struct {
	io.Reader
	closed int
}

func (c *closeCounter) Close() error {
	c.closed++
	return nil
}

// What next returns is normalised, with and without a timeout: a nil Body
// is an empty one (Go issue 38095), a response beside an error is closed
// and dropped, and neither is ErrNilResponse.
func TestSendNormalises(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Minute} {
		t.Run(timeout.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				req := newReq(t.Context(), http.MethodGet, nil)
				resp, err := Send(rtFunc(func(r *http.Request) (*http.Response, error) {
					return newResponse(r, 200, nil), nil
				}), req, timeout, req.Context())
				require.NoError(t, err)
				require.NotNil(t, resp.Body)
				got, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				assert.Empty(t, got)
				resp.Body.Close()

				body := &closeCounter{Reader: strings.NewReader("")}
				boom := errors.New("boom")
				resp, err = Send(rtFunc(func(r *http.Request) (*http.Response, error) {
					return newResponse(r, 200, body), boom
				}), req, timeout, req.Context())
				assert.Nil(t, resp)
				assert.ErrorIs(t, err, boom)
				assert.Equal(t, 1, body.closed, "the response beside the error is closed")

				resp, err = Send(rtFunc(func(*http.Request) (*http.Response, error) { return nil, nil }), req, timeout, req.Context())
				assert.Nil(t, resp)
				assert.ErrorIs(t, err, ErrNilResponse)
			})
		})
	}
}

// An attempt whose headers do not come within its timeout fails with an
// error that is a deadline and still wraps next's; one whose caller's
// context ends first gets next's error alone. A timely response's body
// stays readable after the timeout has passed, until it is closed.
func TestSendTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hang := rtFunc(func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		})
		req := newReq(t.Context(), http.MethodGet, nil)
		start := time.Now()
		_, err := Send(hang, req, time.Second, req.Context())
		assert.Equal(t, time.Second, time.Since(start), "the attempt ends at its timeout")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorIs(t, err, context.Canceled, "next's own error")
		var to interface{ Timeout() bool }
		require.ErrorAs(t, err, &to)
		assert.True(t, to.Timeout())
		assert.Contains(t, err.Error(), "attempt timed out after 1s")

		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		req = newReq(ctx, http.MethodGet, nil)
		_, err = Send(hang, req, time.Second, req.Context())
		assert.Equal(t, context.DeadlineExceeded, err, "the caller's own deadline, unwrapped")

		var attemptCtx context.Context
		req = newReq(t.Context(), http.MethodGet, nil)
		resp, err := Send(rtFunc(func(r *http.Request) (*http.Response, error) {
			attemptCtx = r.Context()
			return newResponse(r, 200, io.NopCloser(strings.NewReader("late"))), nil
		}), req, time.Second, req.Context())
		require.NoError(t, err)
		time.Sleep(2 * time.Second)
		assert.NoError(t, attemptCtx.Err(), "the attempt's context outlives its timeout")
		got, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, "late", string(got))
		resp.Body.Close()
		assert.Error(t, attemptCtx.Err(), "closing the body ends the attempt's context")
	})
}

// A 101 response's body stays writable through the attempt timeout's
// wrapper.
func TestSendUpgradeWritable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wrote bytes.Buffer
		next := rtFunc(func(r *http.Request) (*http.Response, error) {
			return newResponse(r, http.StatusSwitchingProtocols, struct {
				io.Reader
				io.Writer
				io.Closer
			}{strings.NewReader(""), &wrote, io.NopCloser(nil)}), nil
		})
		req := newReq(t.Context(), http.MethodGet, nil)
		resp, err := Send(next, req, time.Second, req.Context())
		require.NoError(t, err)
		w, ok := resp.Body.(io.Writer)
		require.True(t, ok, "the body is no longer a writer")
		_, err = w.Write([]byte("ping"))
		require.NoError(t, err)
		assert.Equal(t, "ping", wrote.String())
		resp.Body.Close()
	})
}
