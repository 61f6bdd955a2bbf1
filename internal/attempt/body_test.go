package attempt

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// trackedBody returns a Body set up for a PUT of payload whose GetBody
// rewinds one shared reader and returns it again, as some SDKs' GetBody
// does for a *bytes.Reader.
func trackedBody(t *testing.T, payload string) *Body {
	shared := &watchedReader{r: bytes.NewReader([]byte(payload))}
	req := newReq(t.Context(), http.MethodPut, shared)
	req.GetBody = shared.getBody
	b := new(Body)
	b.First(req, 4, 0)
	require.True(t, b.tracked, "a shared reader's bodies are tracked")
	return b
}

// readAll reads and closes a request's body.
func readAll(t *testing.T, req *http.Request) string {
	t.Helper()
	b, err := io.ReadAll(req.Body)
	require.NoError(t, err)
	require.NoError(t, req.Body.Close())
	return string(b)
}

// The GetBody functions that http.NewRequest sets return a new reader each
// time, so their bodies are sent as they are; any other GetBody's bodies are
// tracked, because it may hand out one shared reader.
func TestBodySnapshotGetBody(t *testing.T) {
	for _, body := range []io.Reader{bytes.NewBufferString("b"), bytes.NewReader([]byte("b")), strings.NewReader("b")} {
		req, err := http.NewRequest(http.MethodPut, "http://example.test/", body)
		require.NoError(t, err)
		assert.True(t, snapshotGetBody(req.GetBody), "%T", body)
	}
	shared := &watchedReader{r: bytes.NewReader([]byte("b"))}
	assert.False(t, snapshotGetBody(shared.getBody), "a method value")
	assert.False(t, snapshotGetBody(func() (io.ReadCloser, error) { return shared, nil }), "a closure")
}

// First decides how each attempt gets its body, and Next gives every
// replayable body again, byte for byte; the caller's request is never
// modified.
func TestBodyFirstAndNext(t *testing.T) {
	noGetBody := func(s string) *http.Request {
		req := newReq(t.Context(), http.MethodPut, io.NopCloser(strings.NewReader(s)))
		req.GetBody = nil
		return req
	}
	cases := []struct {
		name        string
		req         *http.Request
		maxAttempts int
		buffer      int64
		replayable  bool
		same        bool // the first attempt sends the caller's request itself
	}{
		{"no body", newReq(t.Context(), http.MethodGet, nil), 4, 0, true, true},
		{"GetBody from http.NewRequest", newReq(t.Context(), http.MethodPut, strings.NewReader("body")), 4, 0, true, true},
		{"no GetBody, one attempt", noGetBody("body"), 1, 0, true, true},
		{"no GetBody, no buffer", noGetBody("body"), 4, 0, false, true},
		{"no GetBody, buffered", noGetBody("body"), 4, 4, true, false},
		{"no GetBody, larger than the buffer", noGetBody("body"), 4, 3, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := *c.req
			var b Body
			b.First(c.req, c.maxAttempts, c.buffer)
			assert.Equal(t, c.replayable, b.Replayable(), "replayable")
			first := b.Take()
			assert.Equal(t, c.same, first == c.req, "the first attempt sends the caller's request")
			assert.Nil(t, b.Take(), "taken once")
			want := ""
			if c.req.Body != nil && c.req.Body != http.NoBody {
				want = "body"
				assert.Equal(t, want, readAll(t, first), "the first attempt's body")
			}
			if c.replayable && c.maxAttempts > 1 {
				require.Equal(t, Ready, b.Next())
				next := b.Take()
				assert.NotSame(t, c.req, next, "a retry sends a copy")
				if want != "" {
					assert.Equal(t, want, readAll(t, next), "the retry's body")
				}
			}
			assert.True(t, before.Body == c.req.Body && before.URL == c.req.URL, "the caller's request was modified")
		})
	}
}

// A GetBody that fails leaves nothing queued.
func TestBodyNextGetBodyFails(t *testing.T) {
	req := newReq(t.Context(), http.MethodPut, strings.NewReader("body"))
	req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
	var b Body
	b.First(req, 4, 0)
	readAll(t, b.Take())
	assert.Equal(t, NoFreshBody, b.Next())
	assert.Nil(t, b.Take())
}

// Close closes the body of a request queued and never sent.
func TestBodyCloseQueued(t *testing.T) {
	b := trackedBody(t, "payload")
	b.Close()
	_, err := b.sent.Read(make([]byte, 1))
	assert.ErrorIs(t, err, ErrBodyReleased, "a closed body reads no more")
	assert.Nil(t, b.Take(), "nothing left queued")
	b.Close() // twice: nothing to do
}

// A next RoundTripper that replays a tracked body itself, through the
// attempt's GetBody, gets a tracked body too; once the next attempt's
// request is queued it gets an error instead, and so does a read of the
// attempt's body.
func TestBodyInnerGetBody(t *testing.T) {
	b := trackedBody(t, "payload")
	first := b.Take()
	inner, err := first.GetBody()
	require.NoError(t, err)
	got, err := io.ReadAll(inner)
	require.NoError(t, err)
	assert.Equal(t, "payload", string(got))
	inner.Close()

	require.Equal(t, Ready, b.Next())
	_, err = first.GetBody()
	assert.ErrorIs(t, err, ErrBodyReleased, "a GetBody of an attempt the transport has left")
	_, err = first.Body.Read(make([]byte, 1))
	assert.ErrorIs(t, err, ErrBodyReleased, "a read of an attempt the transport has left")
	assert.Equal(t, "payload", readAll(t, b.Take()), "the next attempt's body")
}
