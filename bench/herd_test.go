package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestHerdSmall runs every peer through a small loopback herd and checks
// that the counts hang together; the table is logged.
func TestHerdSmall(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := HerdConfig{Deliveries: 200, Outage: time.Second}
	start := time.Now()
	rows := RunHerd(c)
	t.Logf("in %v:\n%s", time.Since(start).Round(time.Millisecond), Markdown(c, rows))

	peers := Peers()
	require.Len(t, rows, len(peers))
	for i, r := range rows {
		t.Run(peers[i].Key, func(t *testing.T) {
			assert.Equal(t, peers[i].Name, r.Peer)
			assert.Equal(t, 1, r.Runs)
			assert.GreaterOrEqual(t, r.Attempts, float64(c.Deliveries), "every delivery reaches the server at least once")
			assert.Equal(t, float64(c.Deliveries), r.Attempts-r.Retries, "first attempts")
			assert.LessOrEqual(t, r.Delivered+r.Errors, float64(c.Deliveries))
			assert.LessOrEqual(t, r.Wasted, r.Retries)
			assert.LessOrEqual(t, r.Attempts, float64(c.Deliveries*6), "at most 6 attempts each")
		})
	}
	byKey := map[string]Row{}
	for i, p := range peers {
		byKey[p.Key] = rows[i]
	}
	assert.Zero(t, byKey["bare"].Retries, "the bare transport never retries")
	assert.Zero(t, byKey["bare"].Delivered, "the bare transport's only attempts fall in the outage")
	assert.Positive(t, byKey["retryhttp-off"].Delivered, "retryhttp without budget and breaker outlasts a 1 s outage for some deliveries")
}
