package otelretry_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/otelretry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A hedge is recorded as an attempt with retryhttp.hedge=true, as many as
// Stats.Hedges counts.
func TestHedgeRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := newProvider(t)
		hooks, err := otelretry.NewHooks(mp)
		require.NoError(t, err)
		var n atomic.Int64
		next := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			lag := 5 * time.Millisecond
			if n.Add(1)%20 == 0 {
				lag = 100 * time.Millisecond // one attempt in twenty straggles
			}
			select {
			case <-time.After(lag):
				return respond(req, 200, nil), nil
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
		})
		tr := retryhttp.New(next, retryhttp.WithHedging(0.05), retryhttp.WithHooks(hooks))
		for range 1000 {
			sendAll(t, tr, get(http.MethodGet, "http://hedge.test/"))
		}
		time.Sleep(time.Second) // the losers end in their own time
		synctest.Wait()
		s := tr.Stats()
		require.Positive(t, s.Hedges)
		got := collect(t, reader).sums["retryhttp.attempts"]
		var hedges, all int64
		for set, v := range got {
			all += v
			if strings.Contains(set, "retryhttp.hedge=true") {
				hedges += v
			}
		}
		assert.Equal(t, int64(s.Hedges), hedges)
		assert.Equal(t, int64(s.Attempts), all)
	})
}
