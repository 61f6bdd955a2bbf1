package attempt

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ReadResponse reads a successful response's body into memory when a cut
// could be retried and the body fits; it hands back the rest as they came,
// or streaming; and a cut fails the attempt with the read error.
func TestReadResponse(t *testing.T) {
	const body = "0123456789"
	cut := func() io.Reader {
		return io.MultiReader(strings.NewReader(body[:4]), iotest.ErrReader(io.ErrUnexpectedEOF))
	}
	cases := []struct {
		name      string
		status    int
		length    int64 // Content-Length; -1: none
		r         func() io.Reader
		max       int64
		retryable bool
		want      Buffering
		wantErr   bool
		wantBody  string
	}{
		{"fits", 200, 10, nil, 10, true, Buffered, false, body},
		{"fits, no length", 200, -1, nil, 10, true, Buffered, false, body},
		{"not a success", 503, 10, nil, 10, true, Streamed, false, body},
		{"not retryable", 200, 10, nil, 10, false, Streamed, false, body},
		{"declared too large", 200, 10, nil, 9, true, TooLarge, false, body},
		{"too large, no length", 200, -1, nil, 9, true, TooLarge, false, body},
		{"cut", 200, 10, cut, 10, true, Cut, true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r io.Reader = strings.NewReader(body)
			if c.r != nil {
				r = c.r()
			}
			rc := &closeCounter{Reader: r}
			req := newReq(t.Context(), http.MethodGet, nil)
			resp := newResponse(req, c.status, rc)
			resp.ContentLength = c.length
			got, b, err := ReadResponse(resp, nil, c.max, c.retryable)
			assert.Equal(t, c.want, b)
			if c.wantErr {
				assert.Nil(t, got)
				assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
				assert.Contains(t, err.Error(), "response body cut after 4 bytes")
				assert.Equal(t, 1, rc.closed)
				return
			}
			require.NoError(t, err)
			all, err := io.ReadAll(got.Body)
			require.NoError(t, err)
			assert.Equal(t, c.wantBody, string(all))
			if c.want == Buffered {
				assert.Equal(t, 1, rc.closed, "the body read is closed")
				assert.Equal(t, int64(len(body)), got.ContentLength)
			}
			got.Body.Close()
		})
	}
	boom := errors.New("boom")
	resp, b, err := ReadResponse(nil, boom, 10, true)
	assert.Nil(t, resp)
	assert.Equal(t, Streamed, b)
	assert.Equal(t, boom, err, "an attempt's error passes through")
}
