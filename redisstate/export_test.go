package redisstate

import "testing"

// StartRedis starts a redis-server that t owns, for the package's external
// tests, and returns its address on 127.0.0.1.
func StartRedis(t testing.TB) string { return startRedis(t).Addr() }
