package retryhttp

import (
	"net/http"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// constantPolicy always waits one second: a Policy of the caller's own,
// with no MaxDelay method.
type constantPolicy struct{}

func (constantPolicy) Delay(int, time.Duration) time.Duration { return time.Second }

// cappedPolicy is constantPolicy with a MaxDelay of 10 s.
type cappedPolicy struct{ constantPolicy }

func (cappedPolicy) MaxDelay() time.Duration { return 10 * time.Second }

// A Policy of the caller's own gets RetryAt's spread: the callers an open
// circuit refused come back spread over the policy's MaxDelay, or over
// 30 s without one, evenly; not all at the same instant after the circuit
// may let a probe through, as a draw of a constant policy would put them.
func TestRetryAtCustomPolicy(t *testing.T) {
	for _, c := range []struct {
		name   string
		policy Policy
		window time.Duration
	}{
		{"no MaxDelay: 30 s", constantPolicy{}, 30 * time.Second},
		{"MaxDelay 10 s", cappedPolicy{}, 10 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := NewBreaker(bkConfig())
				bkTrip(t, bkLane(b, testURL))
				open := time.Now().Add(bkConfig().OpenFor)
				tr := New(newNext(reply{status: 200}), WithBreaker(b), WithBudget(nil), WithPolicy(c.policy), WithMaxWait(0))
				const n = 1000
				var offs []time.Duration
				for range n {
					_, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
					require.ErrorIs(t, err, ErrCircuitOpen)
					at, why := tr.RetryAt(nil, err)
					require.Equal(t, ReasonCircuitOpen, why)
					off := at.Sub(open)
					require.True(t, off >= 0 && off < c.window, "%v after the circuit may let a probe through", off)
					offs = append(offs, off)
				}
				// Every tenth of the window, wherever it starts, holds about a
				// tenth of the callers: 100, give or take a slot's worth.
				slices.Sort(offs)
				tenth := c.window / 10
				most := 0
				for i := range offs {
					j, _ := slices.BinarySearch(offs, offs[i]+tenth)
					most = max(most, j-i)
				}
				assert.LessOrEqual(t, most, 125, "callers due within %v of each other", tenth)
				assert.Less(t, offs[0], tenth, "the first caller back")
				assert.Greater(t, offs[n-1], c.window-tenth, "the last caller back")
			})
		})
	}
}
