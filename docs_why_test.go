package retryhttp_test

import (
	"bytes"
	"errors"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docs/why.md's reading of a reason: from an Error when no response came
// back (a host that refuses connections), from Why when one did (a 404,
// and a 503 whose Retry-After a dispatcher's transport does not wait for).
func TestRecipeWhy(t *testing.T) {
	var buf bytes.Buffer
	out, flags := log.Writer(), log.Flags()
	log.SetOutput(&buf)
	log.SetFlags(0)
	defer func() {
		log.SetOutput(out)
		log.SetFlags(flags)
	}()

	// A port nothing listens on: every attempt's connection is refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := "http://" + l.Addr().String() + "/x"
	l.Close()
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	held := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer held.Close()

	for _, c := range []struct {
		url, want string
		isErr     bool
	}{
		{refused, "GET http://" + l.Addr().String() + ": attempts used after 2 attempts, waited 0s\n", true},
		{notFound.URL, "404 Not Found: not retryable\n", false},
		{held.URL, "503 Service Unavailable: held\n", false},
	} {
		buf.Reset()
		tr := retryhttp.New(nil, retryhttp.WithMaxAttempts(2), retryhttp.WithMaxWait(0))
		client := &http.Client{Transport: tr}
		req, err := http.NewRequest(http.MethodGet, c.url, nil)
		require.NoError(t, err)
		got := func() error {
			// recipe: docs/why.md 1
			resp, err := client.Do(req)
			var e *retryhttp.Error
			switch {
			case errors.As(err, &e): // no response: why, after how many attempts, how long it waited
				log.Printf("%s %s: %v after %d attempts, waited %v", e.Method, e.Key, e.Reason, e.Attempts, e.Waited)
				return err
			case err != nil:
				return err // not the transport's: a redirect policy, a cookie jar
			}
			defer resp.Body.Close()
			if resp.StatusCode >= 400 { // a failure handed back: Why gives its reason
				log.Printf("%s: %v", resp.Status, tr.Why(resp, nil))
			}
			// end recipe
			return nil
		}()
		client.CloseIdleConnections()
		assert.Equal(t, c.isErr, got != nil, "%s: %v", c.url, got)
		assert.Equal(t, c.want, buf.String(), c.url)
	}
}
