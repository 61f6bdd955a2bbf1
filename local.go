package retryhttp

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// LocalHeader marks a response made by this transport rather than by the
// server: its value says why ("circuit-open", or "held" for a hold).
const LocalHeader = "X-Retryhttp-Local"

// localOpenResponse is the 503 a request gets, with
// WithCircuitOpenResponse, when the circuit of its key is open, or its key
// held, until probeAt: it tells an SDK above when to come back, in the
// headers SDKs read, and is marked as local. The wait it gives is spread by
// up to spread past probeAt, so that the callers refused together do not
// come back together, and rounded up, so that a caller that waits exactly
// what it is told never comes back before the circuit lets it through.
func localOpenResponse(req *http.Request, key hostKey, probeAt time.Time, spread time.Duration, reason Reason) *http.Response {
	wait := max(time.Until(probeAt), 0) + uniform(0, spread)
	ms := strconv.FormatInt(int64((wait+time.Millisecond-1)/time.Millisecond), 10)
	secs := strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10)
	why := "circuit-open"
	if reason == ReasonHeld {
		why = "held"
	}
	msg := "retryhttp: " + reason.String() + " for " + key.String() + "; retry after " + secs + " s"
	body, _ := json.Marshal(map[string]map[string]string{"error": {"type": "api_error", "code": strings.ReplaceAll(why, "-", "_"), "message": msg}})
	h := http.Header{
		"Content-Type":      {"application/json"},
		"Retry-After":       {secs},
		"Retry-After-Ms":    {ms},
		"X-Amz-Retry-After": {ms},
		"X-Amzn-ErrorType":  {"ServiceUnavailable"}, // names the error for aws-sdk-go-v2's JSON protocols
		LocalHeader:         {why},
	}
	return &http.Response{
		Status:        "503 Service Unavailable",
		StatusCode:    http.StatusServiceUnavailable,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(string(body))),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}
