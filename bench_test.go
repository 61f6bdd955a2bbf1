package retryhttp

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp/fleet"
)

// okNext is the in-memory next of the success-path benchmarks: it closes
// the request body, as a RoundTripper must, and answers with one prebuilt
// 200 response, so that what is measured is the transport's own cost. A
// request whose context carries its own response (ownResponse) gets that
// one: goroutines of a parallel benchmark each get their own, as each
// request gets its own response from a real RoundTripper, so that the
// transport's write of resp.Request does not land on a line the other
// cores share.
type okNext struct{ resp *http.Response }

// ownResponse is the context key of a request's own prebuilt response.
type ownResponse struct{}

func newOKNext() *okNext {
	return &okNext{resp: &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}}}
}

func (n *okNext) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	if r, ok := req.Context().Value(ownResponse{}).(*http.Response); ok {
		return r, nil
	}
	return n.resp, nil
}

// idleStore is a fleet.Store that hears of no other process. The
// benchmarks' fleet is never run, so its store is never called: requests
// read only local memory whatever the store.
type idleStore struct{}

func (idleStore) Announce(context.Context, fleet.Change) error { return nil }

func (idleStore) Watch(ctx context.Context, _ func(fleet.Change)) error {
	<-ctx.Done()
	return nil
}

// BenchmarkRoundTrip measures the success path: one attempt answered 200,
// the bare next beside the transport around it, for a GET and for a PUT
// whose 1 KiB body is a bytes.Reader: with the GetBody that http.NewRequest
// sets ("PUT"), and with a GetBody of the caller's own ("PUT-ownGetBody"),
// whose bodies the transport tracks because such a GetBody may hand out one
// shared reader.
func BenchmarkRoundTrip(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 1<<10)
	next := newOKNext()
	cases := []struct {
		name string
		rt   http.RoundTripper
	}{
		{"bare", next},
		{"retryhttp", New(next)},
		{"retryhttp-nobudget-nobreaker", New(next, WithBudget(nil), WithBreaker(nil))},
		{"retryhttp-fleet", New(next, WithFleet(fleet.New(idleStore{}, fleet.Config{})))},
	}
	ownGetBody := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(payload)), nil }
	// GET-deadline: a GET whose context has a deadline, the common case
	// of a caller with a timeout; its attempts are timed (see clock in learn.go).
	deadline, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, method := range []string{http.MethodGet, "GET-deadline", http.MethodPut, "PUT-ownGetBody"} {
		for _, c := range cases {
			b.Run(method+"/"+c.name, func(b *testing.B) {
				var body *bytes.Reader
				var r io.Reader // nil for a GET: a typed nil would not be
				if !strings.HasPrefix(method, http.MethodGet) {
					body = bytes.NewReader(payload)
					r = body
				}
				ctx := context.Background()
				if method == "GET-deadline" {
					ctx = deadline
				}
				verb, _, _ := strings.Cut(method, "-")
				req, err := http.NewRequestWithContext(ctx, verb, "http://example.test/x", r)
				if err != nil {
					b.Fatal(err)
				}
				if method == "PUT-ownGetBody" {
					req.GetBody = ownGetBody
				}
				b.ReportAllocs()
				for b.Loop() {
					if body != nil {
						body.Reset(payload)
						req.Body = io.NopCloser(body)
					}
					resp, err := c.rt.RoundTrip(req)
					if err != nil || resp.StatusCode != http.StatusOK {
						b.Fatal(resp, err)
					}
				}
			})
		}
	}
}

// BenchmarkRoundTripParallel is the GET success path from every core at
// once, where shared state (the budget's bank, the breaker's lane table,
// the stats counters) would show contention. Each goroutine has its own
// request and response, as it would over a real transport.
func BenchmarkRoundTripParallel(b *testing.B) {
	next := newOKNext()
	for _, c := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"bare", next},
		{"retryhttp", New(next)},
		{"retryhttp-nobudget-nobreaker", New(next, WithBudget(nil), WithBreaker(nil))},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				own := &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}}
				ctx := context.WithValue(context.Background(), ownResponse{}, own)
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.test/x", nil)
				if err != nil {
					b.Error(err)
					return
				}
				for pb.Next() {
					resp, err := c.rt.RoundTrip(req)
					if err != nil || resp.StatusCode != http.StatusOK {
						b.Error(resp, err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkRoundTripQuota is the GET success path of the defaults with a
// typical response's eight headers: without rate-limit headers (a key that
// never advertised a quota, whose responses are read for one once in
// quotaSample), and with the IETF or the X-RateLimit fields of a quota far
// from exhausted (a key whose every response is read, and whose attempts
// go through its pacer).
func BenchmarkRoundTripQuota(b *testing.B) {
	typical := http.Header{
		"Content-Type": {"application/json"}, "Content-Length": {"2"}, "Date": {"Tue, 01 Dec 2026 20:00:00 GMT"},
		"Server": {"nginx"}, "Cache-Control": {"no-store"}, "Vary": {"Accept-Encoding"},
		"X-Request-Id": {"7f3c2a"}, "Strict-Transport-Security": {"max-age=63072000"},
	}
	with := func(kv ...string) http.Header {
		h := typical.Clone()
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	for _, c := range []struct {
		name string
		h    http.Header
	}{
		{"none", typical},
		{"ietf", with("RateLimit-Policy", `"p";q=100000000;w=1`, "RateLimit", `"p";r=99999999;t=1`)},
		{"x-ratelimit", with("X-RateLimit-Limit", "100000000", "X-RateLimit-Remaining", "99999999", "X-RateLimit-Reset", "1")},
	} {
		b.Run(c.name, func(b *testing.B) {
			next := &okNext{resp: &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: c.h}}
			tr := New(next)
			req, err := http.NewRequest(http.MethodGet, "http://example.test/x", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := tr.RoundTrip(req)
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatal(resp, err)
				}
			}
		})
	}
}
