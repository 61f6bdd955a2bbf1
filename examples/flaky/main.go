// Command flaky shows retryhttp riding out a flaky endpoint.
//
// It starts a server on 127.0.0.1 that answers the first -failures requests
// (default 2) with 503 Service Unavailable and "Retry-After: 1", and then 200
// OK. One GET goes through an http.Client whose Transport is retryhttp.New.
// The program prints each attempt as the server sees it and the result the
// client gets, and exits non-zero if that result is not 200:
//
//	go run ./examples/flaky
//	go run ./examples/flaky -failures 10  # more failures than it rides out: gives up
//
// Each retry waits what the server asked for (1 s); a crowd of clients told
// "1 s" would be spread over up to 200 ms so as not to return at the same
// instant, but this lone client has no crowd, and the default run takes
// about 2 s. With more failures than its 4 attempts, the transport sees a
// young failure and rides it out with up to 2 more, a quarter to a half of
// the way into what is left of the client's 30 s timeout, and then gives
// up with the server's last 503: about 20 s.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"time"

	"github.com/retryhttp/retryhttp"
)

func main() {
	failures := flag.Int("failures", 2, "how many requests the server answers with 503 before it answers 200")
	flag.Parse()
	if err := run(os.Stdout, *failures); err != nil {
		fmt.Fprintln(os.Stderr, "flaky:", err)
		os.Exit(1)
	}
}

// run starts the flaky server, sends one request through retryhttp, and
// writes what happened to w. It returns an error unless the final status is
// 200 OK.
func run(w io.Writer, failures int) error {
	// The handler prints from the server's goroutines while run prints from
	// this one: serialise the writes.
	out := &lockedWriter{w: w}
	start := time.Now()

	var (
		mu       sync.Mutex
		attempts int
	)
	handler := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		attempts++
		n := attempts
		mu.Unlock()
		since := time.Since(start).Seconds()
		if n <= failures {
			out.printf("server: attempt %d  +%.3fs  sent %d %s (Retry-After: 1)\n",
				n, since, http.StatusServiceUnavailable, http.StatusText(http.StatusServiceUnavailable))
			rw.Header().Set("Retry-After", "1")
			rw.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(rw, "down for maintenance, try again in a second")
			return
		}
		out.printf("server: attempt %d  +%.3fs  sent %d %s\n", n, since, http.StatusOK, http.StatusText(http.StatusOK))
		fmt.Fprintf(rw, "hello after %d attempts\n", n)
	})

	// httptest listens on 127.0.0.1, on a port of its choosing.
	srv := httptest.NewServer(handler)
	defer srv.Close()
	out.printf("server: %s answers 503 with Retry-After: 1 to the first %d requests, then 200\n", srv.URL, failures)

	t := retryhttp.New(nil,
		// Honour the server's 1 s, never more than 2 s whatever it says...
		retryhttp.WithMaxRetryAfter(2*time.Second),
		// ...plus up to 200 ms for a crowd told "1 s", so it spreads out.
		retryhttp.WithRetryAfterSpread(200*time.Millisecond),
	)
	client := &http.Client{Transport: t, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()

	resp, err := client.Get(srv.URL + "/webhook")
	if err != nil {
		out.printf("client: error after %.3fs: %v\n", time.Since(start).Seconds(), err)
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("reading the body: %w", err)
	}
	out.printf("client: %s after %.3fs, body %q\n", resp.Status, time.Since(start).Seconds(), body)
	if resp.StatusCode != http.StatusOK {
		return errors.New("final status " + resp.Status + ", want 200 OK")
	}
	return nil
}

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format, args...)
}
