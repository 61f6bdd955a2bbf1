package retryhttp

import (
	"crypto/x509"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Why answers, for what RoundTrip handed back, the reason it was not
// retried further, as an Error's Reason would: for a response a failure
// ended on, through an http.Client with a timeout too (which wraps the
// body); ReasonNotRetryable for a status the rules do not retry; the zero
// Reason for a success.
func TestWhy(t *testing.T) {
	certErr := &url.Error{Op: "Get", URL: "https://host.test/", Err: x509.UnknownAuthorityError{}}
	cases := []struct {
		name   string
		method string
		script []reply
		opts   []Option
		want   Reason
	}{
		{"attempts used", http.MethodGet, []reply{{status: 503}}, []Option{WithMaxAttempts(2)}, ReasonAttemptsUsed},
		{"POST without a key", http.MethodPost, []reply{{status: 503}}, nil, ReasonNotReplayable},
		{"budget", http.MethodGet, []reply{{status: 503}}, []Option{WithBudget(NewBudget(BudgetConfig{Ratio: -1, MinPerSecond: -1})), WithMaxWait(0)}, ReasonBudgetExhausted},
		{"server's long wait", http.MethodGet, []reply{{status: 503, header: http.Header{"Retry-After": {"7"}}}}, []Option{WithMaxWait(0)}, ReasonHeld},
		{"a 404", http.MethodGet, []reply{{status: 404}}, nil, ReasonNotRetryable},
		{"a 409", http.MethodGet, []reply{{status: 409}}, nil, ReasonNotRetryable},
		{"a success", http.MethodGet, []reply{{status: 503}, {status: 200}}, nil, reasonNone},
		{"a 304", http.MethodGet, []reply{{status: 304}}, nil, reasonNone},
		{"an error not retried", http.MethodGet, []reply{{err: certErr}}, nil, ReasonNotRetryable},
		{"an error after the attempts", http.MethodGet, []reply{{err: errReset()}}, []Option{WithMaxAttempts(2)}, ReasonAttemptsUsed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := append([]Option{WithBudget(nil), WithBreaker(nil), WithPolicy(immediate{})}, c.opts...)
				tr := New(newNext(c.script...), opts...)
				client := &http.Client{Transport: tr, Timeout: time.Minute}
				req, err := http.NewRequestWithContext(t.Context(), c.method, testURL, strings.NewReader("x"))
				require.NoError(t, err)
				resp, err := client.Do(req)
				if resp != nil {
					readBody(t, resp)
				}
				assert.Equal(t, c.want, tr.Why(resp, err), "Why")
				if err == nil && c.want != reasonNone && c.want != ReasonNotRetryable {
					assert.Equal(t, map[Reason]uint64{c.want: 1}, tr.Stats().GiveUps, "the same reason as the GiveUp count")
				}
			})
		})
	}
	t.Run("not this transport's", func(t *testing.T) {
		tr := New(newNext())
		assert.Equal(t, reasonNone, tr.Why(nil, nil))
		assert.Equal(t, reasonNone, tr.Why(nil, errReset()))
		assert.Equal(t, reasonNone, tr.Why(&http.Response{StatusCode: 503}, nil))
	})
}

// A response Why remembers is forgotten once it is collected: the table
// does not grow with the responses handed back.
func TestWhyForgets(t *testing.T) {
	tr := New(newNext(reply{status: 503}), WithBudget(nil), WithBreaker(nil), WithPolicy(immediate{}), WithMaxAttempts(1))
	for range 100 {
		resp, err := tr.RoundTrip(newReq(t.Context(), http.MethodGet, nil))
		require.NoError(t, err)
		readBody(t, resp)
		require.Equal(t, ReasonAttemptsUsed, tr.Why(resp, nil))
	}
	size := func() int {
		tr.whys.mu.Lock()
		defer tr.whys.mu.Unlock()
		return len(tr.whys.m)
	}
	// Cleanups run on their own goroutine after a collection: collect
	// until they have, a bounded number of times.
	for i := 0; size() > 0 && i < 100; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	assert.Zero(t, size(), "entries left after their responses were collected")
}
