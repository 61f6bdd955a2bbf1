package bench

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// trackBody is a body that records whether it was closed.
type trackBody struct {
	io.Reader
	mu     sync.Mutex
	closed bool
}

func (b *trackBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

func (b *trackBody) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// scripted is an in-memory next: attempt i gets statuses[i] (the last one
// repeats), failures carry header. It records when each attempt came and
// the response bodies it handed out.
type scripted struct {
	statuses []int
	header   http.Header

	mu     sync.Mutex
	times  []time.Time
	bodies []*trackBody
}

func (s *scripted) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.statuses[min(len(s.times), len(s.statuses)-1)]
	s.times = append(s.times, time.Now())
	b := &trackBody{Reader: strings.NewReader("body")}
	s.bodies = append(s.bodies, b)
	h := http.Header{}
	if st != http.StatusOK {
		h = s.header.Clone()
	}
	return &http.Response{StatusCode: st, Header: h, Body: b, Request: req}, nil
}

// TestPeerContract checks, for every peer, the parts of the RoundTripper
// contract and of the schedule that the design fixes for retryhttp, against
// an in-memory next in virtual time. It asserts retryhttp's answers and logs
// every peer's, so that the README's claims about the peers are measured.
func TestPeerContract(t *testing.T) {
	type answers struct {
		replacesBody, closesBody   bool
		postRetried                bool
		discardedClosed, discarded int
		raMin, raMax, raHour       time.Duration
	}
	var lines []string
	for _, p := range Peers()[1:] { // not the bare transport
		var a answers
		synctest.Test(t, func(t *testing.T) {
			// The caller's request and its body.
			next := &scripted{statuses: []int{http.StatusOK}}
			body := &trackBody{Reader: strings.NewReader("payload")}
			req, _ := http.NewRequest(http.MethodPut, "http://tenant.test/hook", body)
			resp, err := p.Wrap(next, DefaultSchedule).RoundTrip(req)
			if assert.NoError(t, err) {
				_ = resp.Body.Close()
			}
			a.replacesBody = req.Body != io.ReadCloser(body)
			a.closesBody = body.isClosed()

			// A POST without Idempotency-Key, answered 503.
			next = &scripted{statuses: []int{http.StatusServiceUnavailable}}
			req, _ = http.NewRequest(http.MethodPost, "http://tenant.test/hook", strings.NewReader("payload"))
			resp, err = p.Wrap(next, DefaultSchedule).RoundTrip(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			a.postRetried = len(next.times) > 1

			// Two failures, then success: are the discarded bodies closed?
			next = &scripted{statuses: []int{503, 503, 200}}
			req, _ = http.NewRequest(http.MethodGet, "http://tenant.test/hook", nil)
			resp, err = p.Wrap(next, DefaultSchedule).RoundTrip(req)
			if assert.NoError(t, err) {
				_ = resp.Body.Close()
			}
			for _, b := range next.bodies[:len(next.bodies)-1] {
				a.discarded++
				if b.isClosed() {
					a.discardedClosed++
				}
			}

			// Retry-After: 1 on a 503, 100 requests: the realised delays.
			a.raMin = time.Hour
			for range 100 {
				next = &scripted{statuses: []int{503, 200}, header: http.Header{"Retry-After": {"1"}}}
				rt := p.Wrap(next, DefaultSchedule)
				req, _ = http.NewRequest(http.MethodGet, "http://tenant.test/hook", nil)
				resp, err = rt.RoundTrip(req)
				if assert.NoError(t, err) {
					_ = resp.Body.Close()
				}
				if len(next.times) == 2 {
					d := next.times[1].Sub(next.times[0])
					a.raMin, a.raMax = min(a.raMin, d), max(a.raMax, d)
				}
			}

			// Retry-After: 3600: is it clamped?
			next = &scripted{statuses: []int{503, 200}, header: http.Header{"Retry-After": {"3600"}}}
			req, _ = http.NewRequest(http.MethodGet, "http://tenant.test/hook", nil)
			resp, err = p.Wrap(next, DefaultSchedule).RoundTrip(req)
			if assert.NoError(t, err) {
				_ = resp.Body.Close()
			}
			if len(next.times) == 2 {
				a.raHour = next.times[1].Sub(next.times[0])
			}
		})
		lines = append(lines, fmt.Sprintf("| %s | %v | %v | %v | %d of %d | %v – %v | %v |",
			p.Name, a.replacesBody, a.closesBody, a.postRetried, a.discardedClosed, a.discarded,
			a.raMin.Round(time.Millisecond), a.raMax.Round(time.Millisecond), a.raHour.Round(time.Second)))
		if p.Key == "retryhttp" {
			assert.False(t, a.replacesBody, "retryhttp must not modify the caller's request")
			assert.True(t, a.closesBody, "retryhttp must close the request body")
			assert.False(t, a.postRetried, "retryhttp must not retry a POST without Idempotency-Key")
			assert.Equal(t, a.discarded, a.discardedClosed, "retryhttp must close what it discards")
			assert.GreaterOrEqual(t, a.raMin, time.Second, "retryhttp must not retry before Retry-After")
			assert.LessOrEqual(t, a.raHour, 31*time.Second, "retryhttp clamps Retry-After to 30 s plus a 1 s spread")
		}
	}
	t.Logf("\n| peer | replaces caller's Body | closes caller's body | retries POST w/o Idempotency-Key | discarded 503 bodies closed | delay after Retry-After: 1 (100 runs) | delay after Retry-After: 3600 |\n|---|---|---|---|---|---|---|\n%s",
		strings.Join(lines, "\n"))
}
