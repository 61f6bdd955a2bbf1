package retryhttptest

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestByAttempt(t *testing.T) {
	h, srv := Start(t, Script{
		ByAttempt: []Action{
			{Status: http.StatusServiceUnavailable},
			{Status: http.StatusBadGateway},
		},
		Then: Action{Status: http.StatusAccepted},
	})
	// Interleaved deliveries: each distinct body fails twice, then succeeds,
	// whatever its request number.
	var got []int
	for _, body := range []string{"a", "b", "a", "b", "a", "c", "b", "a"} {
		code, _, _ := do(t, srv, http.MethodPut, "/d", "", body)
		got = append(got, code)
	}
	require.Equal(t, []int{503, 503, 502, 502, 202, 503, 202, 202}, got)

	// Another URI, method or key is another request.
	code, _, _ := do(t, srv, http.MethodPut, "/e", "", "a")
	require.Equal(t, http.StatusServiceUnavailable, code)
	code, _, _ = do(t, srv, http.MethodPost, "/d", "k", "a")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, 10, h.Count())
}

func TestByAttemptAfterSteps(t *testing.T) {
	_, srv := Start(t, Script{
		Steps:     []Action{{Status: http.StatusTeapot}},
		ByAttempt: []Action{{Status: http.StatusServiceUnavailable}},
	})
	// Request 1 takes the step, though it is the first attempt; request 2
	// is the second identical one, past ByAttempt, so it gets Then.
	require.Equal(t, http.StatusTeapot, get(t, srv))
	require.Equal(t, http.StatusOK, get(t, srv))
	// The slice was copied.
	s := Script{ByAttempt: []Action{{Status: http.StatusBadGateway}}}
	h := NewHandler(s)
	s.ByAttempt[0].Status = http.StatusTeapot
	require.Equal(t, http.StatusBadGateway, h.script.ByAttempt[0].Status)
}
