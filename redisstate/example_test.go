package redisstate_test

import (
	"context"
	"net/http"

	"github.com/redis/go-redis/v9"
	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/fleet"
	"github.com/retryhttp/retryhttp/redisstate"
)

// Share what the processes of one environment learn about their hosts
// through Redis. The example is compiled, not run: it needs a Redis.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379"}) // or a Sentinel, Cluster or TLS client
	defer rdb.Close()
	f := fleet.New(redisstate.New(rdb, redisstate.Options{Prefix: "retryhttp:prod:"}), fleet.Config{})
	go f.Run(ctx) // until ctx ends

	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithFleet(f))}
	_ = client // use it as any http.Client
}
