package sdk

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLocal503Herd sends 10 concurrent SDK calls through one transport
// whose circuit is open, with the local 503 and the SDK's retries on. The
// local 503 tells each refused call its own instant, spread over a second
// past the end of the open time and rounded up, so the calls do not come
// back together: the first back is the half-open probe, and its success
// closes the circuit for the rest. Every call succeeds, after exactly one
// request reached the server, and none is told "0 ms".
func TestLocal503Herd(t *testing.T) {
	t.Parallel()
	const calls = 10
	cases := []struct {
		name  string
		ok    Reply
		call  func(context.Context, env) error
		typed func(error, int) error
		tries int // the SDK's default tries
	}{
		{"openai GET", openaiModel, openaiGetModel, openaiLocalTyped, 3},
		{"s3 GetObject", s3Get, s3GetObject, awsLocalTyped, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := NewServer(t, withTrip(Always(c.ok)))
			crt := &countingRT{next: retryhttp.New(nil, retryhttp.WithMaxAttempts(1),
				retryhttp.WithCircuitOpenResponse(), noWait, retryhttp.WithBreaker(quickBreaker(shortOpen)))}
			hc := &http.Client{Transport: crt, Timeout: 30 * time.Second}
			defer hc.CloseIdleConnections()
			e := env{srv: srv, hc: hc, real: true}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			tripHost(t, ctx, e)
			sentBefore, triesBefore := len(srv.Requests()), len(crt.log())

			start := time.Now()
			errs := make([]error, calls)
			var wg sync.WaitGroup
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = c.call(ctx, e)
				}()
			}
			wg.Wait()

			failed := 0
			for i, err := range errs {
				if err != nil {
					failed++
					assert.NoError(t, c.typed(err, 503), "call %d: error chain %s", i, errorChain(err))
				}
			}
			reqs := srv.Requests()[sentBefore:]
			tries := crt.log()[triesBefore:]
			assert.Len(t, reqs, calls-failed, "requests that reached the server: one per successful call")
			assert.LessOrEqual(t, len(tries), calls*c.tries, "SDK tries")
			local, zero := 0, 0
			for _, tr := range tries {
				if tr.local() {
					local++
					if tr.header.Get("Retry-After-Ms") == "0" {
						zero++
					}
				}
			}
			require.NotZero(t, local)
			assert.Zero(t, failed, "calls that failed although the server was back")
			assert.Zero(t, zero, "refused calls told to come back at once")
			t.Logf("%s: %d concurrent calls, %d failed on the local 503; %d SDK tries, %d refused locally (%d of them told 0 ms), %d reached the server; %.3f s",
				c.name, calls, failed, len(tries), local, zero, len(reqs), time.Since(start).Seconds())
		})
	}
}
