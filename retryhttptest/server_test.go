package retryhttptest

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is a manually advanced clock for the time-based scripts.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// startWithClock is Start with the handler's clock replaced by clk.
func startWithClock(t *testing.T, s Script, clk *fakeClock) (*Handler, *httptest.Server) {
	t.Helper()
	h := NewHandler(s)
	h.now, h.created = clk.Now, clk.Now()
	srv := NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv
}

// do sends a request with the server's client and returns the status code,
// the body and the response header.
func do(t *testing.T, srv *httptest.Server, method, path, key, body string) (int, string, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp.Header
}

func get(t *testing.T, srv *httptest.Server) int {
	t.Helper()
	code, _, _ := do(t, srv, http.MethodGet, "/", "", "")
	return code
}

func TestZeroScriptAnswers200OK(t *testing.T) {
	h, srv := Start(t, Script{})
	code, body, hdr := do(t, srv, http.MethodGet, "/", "", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "OK\n", body)
	require.Equal(t, "3", hdr.Get("Content-Length"))
	require.Empty(t, hdr.Get("Retry-After"))
	require.Equal(t, 1, h.Count())
	require.EqualValues(t, 3, h.BytesWritten())
}

func TestServerListensOnLoopback(t *testing.T) {
	_, srv := Start(t, Script{})
	addr, ok := srv.Listener.Addr().(*net.TCPAddr)
	require.True(t, ok)
	require.True(t, addr.IP.IsLoopback(), "listening on %v", addr)
}

func TestFailNThenSucceed(t *testing.T) {
	h, srv := Start(t, FailN(2, http.StatusServiceUnavailable))
	code, body, _ := do(t, srv, http.MethodGet, "/", "", "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "Service Unavailable\n", body)
	require.Equal(t, http.StatusServiceUnavailable, get(t, srv))
	require.Equal(t, http.StatusOK, get(t, srv))
	require.Equal(t, http.StatusOK, get(t, srv))
	require.Equal(t, 4, h.Count())
}

func TestStepsThenAndHeaders(t *testing.T) {
	_, srv := Start(t, Script{
		Steps: []Action{
			{Status: http.StatusInternalServerError, Header: http.Header{"X-Step": {"1"}}},
			{Status: http.StatusTooManyRequests, Body: []byte{}},
			{Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{}`)},
		},
		Then: Action{Status: http.StatusAccepted, Body: []byte("done")},
	})

	code, body, hdr := do(t, srv, http.MethodGet, "/", "", "")
	require.Equal(t, http.StatusInternalServerError, code)
	require.Equal(t, "Internal Server Error\n", body)
	require.Equal(t, "1", hdr.Get("X-Step"))

	code, body, hdr = do(t, srv, http.MethodGet, "/", "", "")
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Empty(t, body, "a non-nil empty Body sends no bytes")
	require.Equal(t, "0", hdr.Get("Content-Length"))
	require.Empty(t, hdr.Get("X-Step"))

	code, body, hdr = do(t, srv, http.MethodGet, "/", "", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "{}", body)
	require.Equal(t, "application/json", hdr.Get("Content-Type"))

	for range 2 {
		code, body, _ = do(t, srv, http.MethodGet, "/", "", "")
		require.Equal(t, http.StatusAccepted, code)
		require.Equal(t, "done", body)
	}
}

func TestStepsAreNotModifiedByCaller(t *testing.T) {
	steps := []Action{{Status: http.StatusBadGateway}}
	_, srv := Start(t, Script{Steps: steps})
	steps[0].Status = http.StatusTeapot
	require.Equal(t, http.StatusBadGateway, get(t, srv))
}

func TestRetryAfterSeconds(t *testing.T) {
	_, srv := Start(t, Script{Steps: []Action{
		{Status: http.StatusTooManyRequests, RetryAfter: 3 * time.Second},
		{Status: http.StatusServiceUnavailable, RetryAfter: 1500 * time.Millisecond},
	}})
	code, _, hdr := do(t, srv, http.MethodGet, "/", "", "")
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Equal(t, "3", hdr.Get("Retry-After"))

	code, _, hdr = do(t, srv, http.MethodGet, "/", "", "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "2", hdr.Get("Retry-After"), "rounded up to whole seconds")
}

func TestRetryAfterDate(t *testing.T) {
	clk := &fakeClock{t: time.Date(2024, 1, 2, 3, 4, 5, 500e6, time.FixedZone("X", 3600))}
	_, srv := startWithClock(t, Script{Steps: []Action{
		{Status: http.StatusServiceUnavailable, RetryAfter: 2 * time.Second, RetryAfterDate: true},
		{Status: http.StatusServiceUnavailable, RetryAfter: time.Minute, RetryAfterDate: true},
	}}, clk)

	_, _, hdr := do(t, srv, http.MethodGet, "/", "", "")
	// 03:04:05.5 local = 02:04:05.5 UTC, plus 2s, rounded up.
	require.Equal(t, "Tue, 02 Jan 2024 02:04:08 GMT", hdr.Get("Retry-After"))

	clk.t = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	_, _, hdr = do(t, srv, http.MethodGet, "/", "", "")
	require.Equal(t, "Tue, 02 Jan 2024 03:05:05 GMT", hdr.Get("Retry-After"))
	at, err := http.ParseTime(hdr.Get("Retry-After"))
	require.NoError(t, err)
	require.Equal(t, time.Minute, at.Sub(clk.Now()))
}

func TestOutageFromFirstRequest(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	h, srv := startWithClock(t, Script{
		Steps:  Repeat(3, Action{Status: http.StatusInternalServerError}),
		Outage: Outage{For: 10 * time.Second},
	}, clk)

	clk.Advance(time.Hour) // Setup time does not count.
	code, body, _ := do(t, srv, http.MethodGet, "/", "", "")
	require.Equal(t, http.StatusServiceUnavailable, code, "zero Outage.Action.Status means 503")
	require.Equal(t, "Service Unavailable\n", body)

	clk.Advance(10*time.Second - time.Nanosecond)
	require.Equal(t, http.StatusServiceUnavailable, get(t, srv))

	clk.Advance(time.Nanosecond)
	// Request 3: the outage is over, and it used up steps 1 and 2.
	require.Equal(t, http.StatusInternalServerError, get(t, srv))
	require.Equal(t, http.StatusOK, get(t, srv))
	require.Equal(t, 4, h.Count())
}

func TestOutageFromStart(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	_, early := startWithClock(t, Script{Outage: Outage{For: 10 * time.Second, FromStart: true}}, clk)
	_, late := startWithClock(t, Script{Outage: Outage{For: 10 * time.Second, FromStart: true}}, clk)

	clk.Advance(5 * time.Second)
	require.Equal(t, http.StatusServiceUnavailable, get(t, early))
	clk.Advance(5 * time.Second)
	require.Equal(t, http.StatusOK, get(t, late), "outage measured from NewHandler, not the first request")
	require.Equal(t, http.StatusOK, get(t, early))
}

func TestOutageAction(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	_, srv := startWithClock(t, Script{Outage: Outage{
		For:    time.Minute,
		Action: Action{Status: http.StatusBadGateway, RetryAfter: time.Second, Body: []byte("down")},
	}}, clk)
	code, body, hdr := do(t, srv, http.MethodGet, "/", "", "")
	require.Equal(t, http.StatusBadGateway, code)
	require.Equal(t, "down", body)
	require.Equal(t, "1", hdr.Get("Retry-After"))
}

func TestNoContentHasNoBody(t *testing.T) {
	h, srv := Start(t, Script{Then: Action{Status: http.StatusNoContent}})
	code, body, _ := do(t, srv, http.MethodDelete, "/x", "", "")
	require.Equal(t, http.StatusNoContent, code)
	require.Empty(t, body)
	require.Zero(t, h.BytesWritten())
}

func TestCounts(t *testing.T) {
	h, srv := Start(t, Script{})
	do(t, srv, http.MethodGet, "/a?q=1", "", "")
	do(t, srv, http.MethodPost, "/pay", "k1", "one")
	do(t, srv, http.MethodPost, "/pay", "k1", "one")
	do(t, srv, http.MethodPut, "/pay", "k2", "two")
	do(t, srv, http.MethodGet, "/a?q=1", "", "")
	do(t, srv, http.MethodPost, "/pay", "", "one")

	require.Equal(t, 6, h.Count())
	require.Equal(t, map[string]int{"GET": 2, "POST": 3, "PUT": 1}, h.Methods())
	empty, one, two := BodyHash(nil), BodyHash([]byte("one")), BodyHash([]byte("two"))
	require.Equal(t, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", empty)
	require.Equal(t, []string{empty, one, one, two, empty, one}, h.BodyHashes())
	require.Equal(t, map[string]int{empty: 2, one: 3, two: 1}, h.HashCounts())
	require.Equal(t, map[string]int{"k1": 2, "k2": 1}, h.Keys())

	reqs := h.Requests()
	require.Len(t, reqs, 6)
	type summary struct {
		N, Attempt  int
		Method, URI string
		Key         string
		Size        int64
	}
	var got []summary
	for _, r := range reqs {
		got = append(got, summary{r.N, r.Attempt, r.Method, r.URI, r.IdempotencyKey, r.BodySize})
		require.Equal(t, r.IdempotencyKey, r.Header.Get("Idempotency-Key"))
		require.False(t, r.At.IsZero())
	}
	require.Equal(t, []summary{
		{1, 1, "GET", "/a?q=1", "", 0},
		{2, 1, "POST", "/pay", "k1", 3},
		{3, 2, "POST", "/pay", "k1", 3},
		{4, 1, "PUT", "/pay", "k2", 3},
		{5, 2, "GET", "/a?q=1", "", 0},
		{6, 1, "POST", "/pay", "", 3},
	}, got)
	require.False(t, reqs[4].At.Before(reqs[0].At))
}

func TestAccessorsReturnCopies(t *testing.T) {
	h, srv := Start(t, Script{})
	do(t, srv, http.MethodPost, "/", "k", "body")

	h.Methods()["POST"] = 99
	h.Keys()["k"] = 99
	h.HashCounts()[BodyHash([]byte("body"))] = 99
	h.BodyHashes()[0] = "changed"
	r := h.Requests()
	r[0].Method = "changed"
	r[0].Header.Set("Idempotency-Key", "changed")

	require.Equal(t, map[string]int{"POST": 1}, h.Methods())
	require.Equal(t, map[string]int{"k": 1}, h.Keys())
	require.Equal(t, map[string]int{BodyHash([]byte("body")): 1}, h.HashCounts())
	require.Equal(t, []string{BodyHash([]byte("body"))}, h.BodyHashes())
	require.Equal(t, "POST", h.Requests()[0].Method)
	require.Equal(t, "k", h.Requests()[0].Header.Get("Idempotency-Key"))
}

func TestConcurrentRequests(t *testing.T) {
	const n, failures = 20, 5
	h, srv := Start(t, FailN(failures, http.StatusServiceUnavailable))

	codes := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("body"))
			if err != nil {
				codes <- -1
				return
			}
			req.Header.Set("Idempotency-Key", "k"+string(rune('a'+i)))
			resp, err := srv.Client().Do(req)
			if err != nil {
				codes <- -1
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
			_ = h.Count() // Read while others write.
			_ = h.Requests()
		})
	}
	wg.Wait()
	close(codes)

	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	require.Equal(t, map[int]int{http.StatusServiceUnavailable: failures, http.StatusOK: n - failures}, count)
	require.Equal(t, n, h.Count())
	require.Len(t, h.Keys(), n)
	require.Equal(t, map[string]int{BodyHash([]byte("body")): n}, h.HashCounts())
	var ns []int
	for _, r := range h.Requests() {
		ns = append(ns, r.N)
	}
	require.True(t, slices.IsSorted(ns))
	require.Equal(t, 1, ns[0])
	require.Equal(t, n, ns[n-1])
	require.Len(t, slices.Compact(ns), n)
}

func TestRepeat(t *testing.T) {
	require.Nil(t, Repeat(0, Action{}))
	require.Nil(t, Repeat(-1, Action{}))
	got := Repeat(3, Action{Status: http.StatusTeapot})
	require.Len(t, got, 3)
	for _, a := range got {
		require.Equal(t, http.StatusTeapot, a.Status)
	}
	require.Equal(t, Script{Steps: got}, FailN(3, http.StatusTeapot))
}

func TestFaultString(t *testing.T) {
	require.Equal(t, "NoFault", NoFault.String())
	require.Equal(t, "ResetAfterRequest", ResetAfterRequest.String())
	require.Equal(t, "ResetMidBody", ResetMidBody.String())
	require.Equal(t, "Fault(7)", Fault(7).String())
}

func TestRetryAfterFormatting(t *testing.T) {
	now := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	require.Equal(t, "1", retryAfter(now, time.Nanosecond, false))
	require.Equal(t, "120", retryAfter(now, 2*time.Minute, false))
	require.Equal(t, "Tue, 02 Jan 2024 03:04:07 GMT", retryAfter(now, 2*time.Second, true))
	require.Equal(t, "Tue, 02 Jan 2024 03:04:06 GMT", retryAfter(now, time.Millisecond, true))
}
