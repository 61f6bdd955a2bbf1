// Command consumer is the program of the install check (.ci/installcheck):
// a user's module, outside the repository, that fetches the library,
// otelretry and redisstate at the version being released and uses each a
// little. It sends one request to a server it starts on 127.0.0.1, which
// answers 503 once and then 200, through a transport with otelretry's
// hooks and a fleet on a redisstate store; the fleet is never run, so the
// Redis client is never dialled.
package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/fleet"
	"github.com/retryhttp/retryhttp/otelretry"
	"github.com/retryhttp/retryhttp/redisstate"
	"go.opentelemetry.io/otel/metric/noop"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run() error {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "delivered")
	}))
	defer srv.Close()

	hooks, err := otelretry.NewHooks(noop.NewMeterProvider())
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	f := fleet.New(redisstate.New(rdb, redisstate.Options{Prefix: "installcheck:"}), fleet.Config{})
	tr := retryhttp.New(nil, retryhttp.WithHooks(hooks), retryhttp.WithFleet(f))
	defer tr.CloseIdleConnections()

	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	st := tr.Stats()
	if resp.StatusCode != http.StatusOK || st.Attempts != 2 || calls.Load() != 2 {
		return fmt.Errorf("got %d %q after %d attempts (the server saw %d), want 200 after 2", resp.StatusCode, body, st.Attempts, calls.Load())
	}
	fmt.Printf("consumer: %d %q after %d attempts through retryhttp with otelretry hooks and a redisstate fleet store\n",
		resp.StatusCode, body, st.Attempts)
	return nil
}
