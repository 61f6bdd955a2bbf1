// Package testhttp holds what the tests of several packages of the module
// need to answer and send requests through a RoundTripper.
package testhttp

import (
	"io"
	"net/http"
	"strconv"
	"testing"
)

// Response returns a response to req with status and body, as a next
// RoundTripper returns it.
func Response(req *http.Request, status int, body io.ReadCloser) *http.Response {
	return &http.Response{
		Status:     strconv.Itoa(status) + " " + http.StatusText(status),
		StatusCode: status,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     http.Header{},
		Body:       body,
		Request:    req,
	}
}

// SendGET sends one GET for rawURL through rt; it must return a response,
// whose body it closes. It is safe to call from any goroutine of the test.
func SendGET(t testing.TB, rt http.RoundTripper, rawURL string) {
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, rawURL, nil)
	if err != nil {
		t.Error(err)
		return
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Error(err)
		return
	}
	resp.Body.Close()
}
