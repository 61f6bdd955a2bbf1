package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// attemptLine matches what the server prints for each attempt.
var attemptLine = regexp.MustCompile(`(?m)^server: attempt (\d+)  \+(\d+\.\d+)s  sent (\d{3}) `)

type attempt struct {
	n      int
	at     time.Duration // since run started
	status int
}

func attempts(t *testing.T, out string) []attempt {
	t.Helper()
	var as []attempt
	for _, m := range attemptLine.FindAllStringSubmatch(out, -1) {
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		secs, err := strconv.ParseFloat(m[2], 64)
		require.NoError(t, err)
		status, err := strconv.Atoi(m[3])
		require.NoError(t, err)
		as = append(as, attempt{n, time.Duration(secs * float64(time.Second)), status})
	}
	return as
}

// TestRun runs the example against its real loopback server, in real time:
// about 2 s for the default two failures.
func TestRun(t *testing.T) {
	// Cleanup, not defer: it runs after the parallel subtests end.
	t.Cleanup(func() { goleak.VerifyNone(t) })

	t.Run("default_2_failures", func(t *testing.T) {
		t.Parallel()
		var out bytes.Buffer
		err := run(&out, 2)
		t.Logf("output:\n%s", out.String())
		require.NoError(t, err)

		as := attempts(t, out.String())
		require.Len(t, as, 3, "attempts the server saw")
		for i, want := range []int{503, 503, 200} {
			assert.Equal(t, i+1, as[i].n, "attempt number")
			assert.Equal(t, want, as[i].status, "status sent to attempt %d", i+1)
		}
		// Each retry waits Retry-After (1 s), never less (a lone client
		// gets no spread; the times are printed to the millisecond, hence
		// the 1 ms below); the upper bound leaves 1 s for a loaded machine.
		for i := 1; i < len(as); i++ {
			gap := as[i].at - as[i-1].at
			assert.GreaterOrEqual(t, gap, time.Second-time.Millisecond, "gap before attempt %d", i+1)
			assert.Less(t, gap, 2*time.Second, "gap before attempt %d", i+1)
		}
		assert.Regexp(t, `(?m)^client: 200 OK after \d+\.\d+s, body "hello after 3 attempts\\n"$`, out.String())
	})

	t.Run("no_failures", func(t *testing.T) {
		t.Parallel()
		var out bytes.Buffer
		require.NoError(t, run(&out, 0))
		as := attempts(t, out.String())
		require.Len(t, as, 1, "output:\n%s", out.String())
		assert.Equal(t, 200, as[0].status)
		assert.Contains(t, out.String(), "client: 200 OK")
	})

	t.Run("more_failures_than_attempts", func(t *testing.T) {
		t.Parallel()
		// 4 attempts by default and 2 more to ride a young failure out,
		// all 503 (fewer if a budget or breaker stops the retries): the
		// caller gets the last real 503 and run reports it, so the
		// program exits non-zero.
		var out bytes.Buffer
		err := run(&out, 10)
		t.Logf("output:\n%s", out.String())
		require.Error(t, err)
		as := attempts(t, out.String())
		require.NotEmpty(t, as)
		require.LessOrEqual(t, len(as), 4+2, "attempts the server saw")
		for _, a := range as {
			assert.Equal(t, 503, a.status, "status sent to attempt %d", a.n)
		}
		assert.NotContains(t, out.String(), "client: 200")
	})
}
