package retryhttp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A full-duplex HTTP/2 exchange through the transport: the request body
// streams from an io.Pipe while the response streams back, each line of
// the request echoed before the next is written, so that the exchange
// deadlocks unless RoundTrip returns with the request body still open and
// the transport leaves it alone. Over TLS on 127.0.0.1, with the defaults,
// with a deadline (the attempt is timed), with an attempt timeout (the
// response body holds the attempt's context) and with the response buffer
// on (a request whose body cannot be replayed is not buffered).
func TestDuplexHTTP2(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush() // the headers go before a byte of the body is read
		lines := bufio.NewScanner(r.Body)
		for lines.Scan() {
			fmt.Fprintf(w, "echo %s\n", lines.Text())
			w.(http.Flusher).Flush()
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()

	cases := []struct {
		name     string
		method   string
		opts     []Option
		deadline bool
	}{
		{"defaults, POST", http.MethodPost, nil, false},
		{"defaults, PUT, deadline", http.MethodPut, nil, true},
		{"attempt timeout", http.MethodPut, []Option{WithAttemptTimeout(time.Minute)}, true},
		{"response buffer", http.MethodPut, []Option{WithResponseBuffer(1 << 20)}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := New(srv.Client().Transport, c.opts...)
			defer tr.CloseIdleConnections()
			ctx := t.Context()
			if c.deadline {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Minute)
				defer cancel()
			}
			pr, pw := io.Pipe()
			req, err := http.NewRequestWithContext(ctx, c.method, srv.URL+"/duplex", pr)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			assert.Equal(t, 2, resp.ProtoMajor, "HTTP/2")
			assert.Equal(t, http.StatusOK, resp.StatusCode)

			echoes := bufio.NewReader(resp.Body)
			for i := range 5 {
				_, err := fmt.Fprintf(pw, "line %d\n", i)
				require.NoError(t, err, "the request body is still being sent after RoundTrip returned")
				echo, err := echoes.ReadString('\n')
				require.NoError(t, err)
				assert.Equal(t, fmt.Sprintf("echo line %d\n", i), echo, "each line comes back before the next is written")
			}
			require.NoError(t, pw.Close())
			rest, err := io.ReadAll(echoes)
			assert.NoError(t, err)
			assert.Empty(t, rest, "the response ends with the request body")
			assert.Zero(t, tr.Stats().ResponsesBuffered, "a body that cannot be replayed is not buffered")
		})
	}
}
