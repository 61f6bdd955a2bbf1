package redisstate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/fleet"
	"github.com/retryhttp/retryhttp/redisstate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fleet recipe of README.md and docs/fleet.md, as written, on a
// redis-server the test owns: a second process, sharing the same Redis,
// adopts the circuit that the recipe's client opens on a failing host.
func TestRecipeFleet(t *testing.T) {
	redisAddr := redisstate.StartRedis(t)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer failing.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	// recipe: README.md 5, docs/fleet.md 1
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr}) // or your Sentinel, Cluster or TLS client
	f := fleet.New(redisstate.New(rdb, redisstate.Options{Prefix: "retryhttp:prod:"}), fleet.Config{})
	go f.Run(ctx) // for as long as the transports are used; returns when ctx ends
	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithFleet(f))}
	// end recipe
	defer rdb.Close()
	defer client.CloseIdleConnections()

	// The second process.
	opened := make(chan string, 1)
	other := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer other.Close()
	f2 := fleet.New(redisstate.New(other, redisstate.Options{Prefix: "retryhttp:prod:"}), fleet.Config{})
	b2 := retryhttp.NewBreaker(retryhttp.BreakerConfig{OnStateChange: func(e retryhttp.Event) {
		if e.To == retryhttp.StateOpen {
			select {
			case opened <- e.Key:
			default:
			}
		}
	}})
	_ = retryhttp.New(nil, retryhttp.WithBreaker(b2), retryhttp.WithFleet(f2))
	done := make(chan struct{})
	go func() { defer close(done); _ = f2.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// The recipe's client fails against the host until the other process
	// hears its circuit opened: the breaker trips on failure that lasts
	// its 2 s span. At most 15 s.
	var key string
	deadline := time.After(15 * time.Second)
	for key == "" {
		select {
		case key = <-opened:
			continue
		case <-deadline:
			t.Fatal("the other process never adopted the open circuit")
		default:
		}
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, failing.URL, nil)
		require.NoError(t, err)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
		rcancel()
	}
	assert.True(t, strings.HasSuffix(failing.URL, strings.TrimPrefix(key, "http://")), "the failing host's circuit: %s", key)
	assert.Positive(t, f.Stats().Announced, "the recipe's fleet announced through Redis")
}
