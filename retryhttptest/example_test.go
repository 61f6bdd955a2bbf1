package retryhttptest_test

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/retryhttp/retryhttp/retryhttptest"
)

func Example() {
	// A server that fails twice with 503, asking to retry after 1 second,
	// then succeeds.
	h := retryhttptest.NewHandler(retryhttptest.Script{
		Steps: retryhttptest.Repeat(2, retryhttptest.Action{
			Status:     http.StatusServiceUnavailable,
			RetryAfter: time.Second,
		}),
	})
	srv := retryhttptest.NewServer(h)
	defer srv.Close()

	for range 3 {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Printf("%d Retry-After=%q\n", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	fmt.Println("requests:", h.Count(), "GETs:", h.Methods()["GET"])
	// Output:
	// 503 Retry-After="1"
	// 503 Retry-After="1"
	// 200 Retry-After=""
	// requests: 3 GETs: 3
}

func ExampleFailN() {
	h := retryhttptest.NewHandler(retryhttptest.FailN(1, http.StatusBadGateway))
	srv := retryhttptest.NewServer(h)
	defer srv.Close()

	for range 2 {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %q\n", resp.StatusCode, body)
	}
	// Output:
	// 502 "Bad Gateway\n"
	// 200 "OK\n"
}
