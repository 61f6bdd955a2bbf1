package bench

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryhttp/retryhttp"
)

// okNext drains and closes the request body, as a RoundTripper must, and
// answers 200 with one shared response whose body is http.NoBody, so that
// what is measured is the wrapper's own cost.
type okNext struct{ resp *http.Response }

func newOKNext() *okNext {
	return &okNext{resp: &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}}}
}

func (n *okNext) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	// failsafe-go replaces the Body of the response it returns, in place;
	// put NoBody back so that wrappers do not pile up. The benchmarks are
	// serial, so the shared response is never written concurrently.
	n.resp.Body = http.NoBody
	return n.resp, nil
}

// BenchmarkSuccess measures the success path, one attempt answered 200,
// for the bare next and for each peer around it: against an in-memory next
// and against a loopback server through a pooled http.Transport with
// keep-alives, for a GET and for a PUT whose 1 KiB body is a bytes.Reader
// (so the request has GetBody). Each peer runs with retryhttp's default
// schedule: base 200 ms, cap 30 s, 4 attempts.
//
//	go test -run xxx -bench . -benchmem -count 5
func BenchmarkSuccess(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 1<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	targets := []struct {
		name, url string
		next      func() http.RoundTripper
	}{
		{"inmem", "http://example.test/x", func() http.RoundTripper { return newOKNext() }},
		{"loopback", srv.URL + "/x", func() http.RoundTripper { return cleanhttp.DefaultPooledTransport() }},
	}
	retryablehttp, _ := PeerByKey("retryablehttp")
	failsafe, _ := PeerByKey("failsafe")
	wrappers := []struct {
		name string
		wrap func(http.RoundTripper) http.RoundTripper
	}{
		{"bare", func(next http.RoundTripper) http.RoundTripper { return next }},
		{"retryhttp", func(next http.RoundTripper) http.RoundTripper { return retryhttp.New(next) }},
		{"retryablehttp", func(next http.RoundTripper) http.RoundTripper { return retryablehttp.Wrap(next, DefaultSchedule) }},
		{"failsafe", func(next http.RoundTripper) http.RoundTripper { return failsafe.Wrap(next, DefaultSchedule) }},
	}
	for _, target := range targets {
		for _, method := range []string{http.MethodGet, http.MethodPut} {
			for _, w := range wrappers {
				b.Run(target.name+"/"+method+"/"+w.name, func(b *testing.B) {
					next := target.next()
					defer closeIdle(next)
					rt := w.wrap(next)
					req, err := http.NewRequest(method, target.url, nil)
					if err != nil {
						b.Fatal(err)
					}
					body := bytes.NewReader(payload)
					rc := io.NopCloser(body)
					if method == http.MethodPut {
						req.ContentLength = int64(len(payload))
						req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(payload)), nil }
					}
					b.ReportAllocs()
					for b.Loop() {
						if method == http.MethodPut {
							// What http.NewRequest sets for a bytes.Reader,
							// without its allocations.
							body.Reset(payload)
							req.Body = rc
						}
						resp, err := rt.RoundTrip(req)
						if err != nil {
							b.Fatal(err)
						}
						if resp.StatusCode != http.StatusOK {
							b.Fatal(resp.Status)
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
					}
				})
			}
		}
	}
}

func closeIdle(rt http.RoundTripper) {
	if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
