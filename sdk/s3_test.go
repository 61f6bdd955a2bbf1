package sdk

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
)

// S3's replies. Real S3 answers an overload with 503 SlowDown, a throttling
// code that the SDK backs off from for a base of 1 s; ServiceUnavailable
// keeps the SDK's 50 ms base and the tests fast.
var (
	s3503 = Reply{Status: 503, Header: map[string]string{"Content-Type": "application/xml", "X-Amz-Request-Id": "REQ503"},
		Body: []byte(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
			`<Error><Code>ServiceUnavailable</Code><Message>scripted 503</Message><RequestId>REQ503</RequestId><HostId>host</HostId></Error>`)}
	s3Put = Reply{Status: 200, Header: map[string]string{"ETag": `"9b2cf535f27731c974343645a3985328"`, "X-Amz-Request-Id": "REQ200"}}
	s3Get = Reply{Status: 200, Header: map[string]string{"Content-Type": "text/plain", "ETag": `"5d41402abc4b2a76b9719d911017c592"`},
		Body: []byte("hello")}
)

// s3Payload is the PutObject body: 64 KiB, every byte position distinct
// modulo 251, so a shifted or truncated replay shows.
var s3Payload = func() []byte {
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}()

// newS3 builds an S3 client on e's *http.Client, path-style, pointed at
// the server.
func newS3(e env) *s3.Client {
	o := s3.Options{
		Region:       awsRegion,
		Credentials:  awsCreds,
		HTTPClient:   e.hc,
		BaseEndpoint: aws.String(e.srv.URL),
		UsePathStyle: true,
	}
	awsRetry(e, &o.Retryer, &o.RetryMaxAttempts)
	return s3.New(o)
}

func s3GetObject(ctx context.Context, e env) error { return s3GetFrom("bkt")(ctx, e) }

// s3GetFrom gets the object "obj" from bucket: the request goes to
// /bucket/obj on the server (path-style).
func s3GetFrom(bucket string) func(context.Context, env) error {
	return func(ctx context.Context, e env) error {
		out, err := newS3(e).GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("obj")})
		if err != nil {
			return err
		}
		defer out.Body.Close()
		_, err = io.Copy(io.Discard, out.Body)
		return err
	}
}

// bucketKey keys circuits, holds and per-host budgets by scheme, host and
// first path segment: on a path-style endpoint, by bucket.
func bucketKey(r *http.Request) string {
	seg, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	return r.URL.Scheme + "://" + r.URL.Host + "/" + seg
}

// twoBuckets is one path-style host with a failing bucket and a healthy one.
var twoBuckets = ByPath(map[string]Script{"/bad/obj": Always(s3503), "/good/obj": Always(s3Get)}, Always(s3503))

// pathBreaker is the default breaker with a 100 ms span instead of 2 s: the
// S3 SDK pauses at most 50 ms, then 100 ms, between its tries, well inside
// twice the span, so its failing calls trip it within a few calls.
func pathBreaker() *retryhttp.Breaker {
	return retryhttp.NewBreaker(retryhttp.BreakerConfig{Span: 100 * time.Millisecond, OnStateChange: recordOpen})
}

// onlyPath asserts that every request of the call went to path.
func onlyPath(path string) func(*testing.T, []Request) {
	return func(t *testing.T, reqs []Request) {
		for _, r := range reqs {
			assert.Equal(t, path, r.Path, "request %d", r.N)
		}
	}
}

func s3PutObject(ctx context.Context, e env) error {
	_, err := newS3(e).PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("bkt"), Key: aws.String("obj"), Body: bytes.NewReader(s3Payload),
	})
	return err
}

func s3Typed(err error, status int) error { return awsTyped(err, status, "ServiceUnavailable") }

func TestS3(t *testing.T) {
	one := retryhttp.WithMaxAttempts(1)
	buffer := retryhttp.WithBodyBuffer(1 << 20)
	runSDK(t, sdkCase{name: "s3", typed: s3Typed, rows: append([]row{
		{
			name: "a defaults, real delays (GET)", real: true,
			script: Always(s3503), call: s3GetObject, status: 503, mayTrip: true,
		},
		{
			name: "a defaults, fast delays (GET)", opts: opts(fast),
			script: Always(s3503), call: s3GetObject, status: 503, promised: 3*4 + rideOut, want: 3*4 + rideOut,
		},
		{
			name: "b SDK off + retryhttp defaults (GET)", tries: 1,
			script: Always(s3503), call: s3GetObject, status: 503, promised: 4 + rideOut, want: 4 + rideOut,
		},
		{
			// The SDK's request body has no GetBody: without a buffer
			// retryhttp sends a PutObject once.
			name: "b SDK off + retryhttp defaults (PUT, no body buffer)", tries: 1,
			script: Always(s3503), call: s3PutObject, status: 503, promised: 4, want: 1,
		},
		{
			name: "c retryhttp 1 attempt + SDK defaults (GET)", opts: opts(one),
			script: Always(s3503), call: s3GetObject, status: 503, promised: 3, want: 3,
			check: checks(sameHeader("amz-sdk-invocation-id", invocationID), sdkRequestPerTry),
		},
		{
			// The transport's own retries replay one signed request: the
			// body, its hash, the signature and amz-sdk-request stay put.
			name: "e PUT + WithBodyBuffer(1 MiB), SDK defaults, 503,503,200", opts: opts(buffer),
			script: FailThen(2, s3503, s3Put), call: s3PutObject, promised: 4, want: 3,
			check: checks(logAWS, sameBody, payloadHashes,
				sameHeader("Authorization", authorization), sameHeader("X-Amz-Date", amzDate),
				sameHeader("amz-sdk-request", sdkRequest), sameHeader("amz-sdk-invocation-id", invocationID)),
		},
		{
			// Without the buffer the SDK retries, re-signing each try and
			// counting it in amz-sdk-request.
			name:   "e PUT, no body buffer, SDK defaults, 503,503,200",
			script: FailThen(2, s3503, s3Put), call: s3PutObject, promised: 3, want: 3,
			check: checks(logAWS, sameBody, payloadHashes, signs("amz-sdk-request"),
				sameHeader("amz-sdk-invocation-id", invocationID), sdkRequestPerTry),
		},
		{
			name:   "e 503,503,200 (GET), both defaults",
			script: FailThen(2, s3503, s3Get), call: s3GetObject, promised: 4, want: 3,
			check: sameHeader("amz-sdk-request", sdkRequest),
		},
		{
			// The other recipe for a PutObject: the SDK off, retryhttp
			// replaying the buffered body under the first try's signature.
			name: "e PUT + WithBodyBuffer(1 MiB), SDK off + retryhttp 4, 503 forever", tries: 1, opts: opts(buffer),
			script: Always(s3503), call: s3PutObject, status: 503, promised: 4 + rideOut, want: 4 + rideOut,
			check: checks(sameBody, payloadHashes, sameHeader("Authorization", authorization), sameHeader("amz-sdk-request", sdkRequest)),
		},

		// The recipe: the SDK's retries on (3 tries, each signed afresh,
		// amz-sdk-request counting them, X-Amz-Retry-After read), retryhttp
		// sending each try once. No body buffer needed: the SDK rewinds
		// its own body.
		{
			name: "r recipe: SDK 3 + retryhttp 1: GET, 503 forever", opts: opts(one),
			script: Always(s3503), call: s3GetObject, status: 503, promised: 3, want: 3,
			check: sdkRequestPerTry,
		},
		{
			name: "r recipe: SDK 3 + retryhttp 1: GET, 503,503,200", opts: opts(one),
			script: FailThen(2, s3503, s3Get), call: s3GetObject, promised: 3, want: 3,
			check: sdkRequestPerTry,
		},
		{
			name: "r recipe: SDK 3 + retryhttp 1: PUT, 503 forever", opts: opts(one),
			script: Always(s3503), call: s3PutObject, status: 503, promised: 3, want: 3,
			check: checks(sameBody, payloadHashes, sdkRequestPerTry),
		},

		// The per-request form under a transport of 4.
		{
			name:   "p per-request 1 attempt, transport 4, SDK defaults: GET, 503 forever",
			ctx:    perRequest(retryhttp.WithMaxAttempts(1)),
			script: Always(s3503), call: s3GetObject, status: 503, promised: 3, want: 3,
			check: sdkRequestPerTry, inspect: oncePerTry,
		},
		{
			name:   "p per-request 1 attempt, transport 4, SDK defaults: PUT, 503 forever",
			ctx:    perRequest(retryhttp.WithMaxAttempts(1)),
			script: Always(s3503), call: s3PutObject, status: 503, promised: 3, want: 3,
			check: checks(sameBody, payloadHashes, sdkRequestPerTry), inspect: oncePerTry,
		},

		// A GET marked not idempotent through its context.
		{
			name: "i GET, not idempotent by context, SDK off + retryhttp 4", tries: 1, opts: opts(fast),
			ctx:    perRequest(retryhttp.WithIdempotentIf(never)),
			script: Always(s3503), call: s3GetObject, status: 503, want: 1,
		},

		// Path-style: one host, two buckets. Keyed by bucket, the failing
		// bucket's circuit opens and the other's stays closed; keyed by
		// host (the default), one bucket's failures stop both.
		{
			name: "j key by bucket: \"good\" after \"bad\" opened", opts: opts(one, retryhttp.WithKey(bucketKey), noWait, retryhttp.WithBreaker(pathBreaker())),
			prep: tripWith("/bad", 20, s3GetFrom("bad")), script: twoBuckets, call: s3GetFrom("good"),
			want: 1, check: onlyPath("/good/obj"),
		},
		{
			name: "j key by bucket: \"bad\" after it opened", opts: opts(one, retryhttp.WithKey(bucketKey), noWait, retryhttp.WithBreaker(pathBreaker())),
			prep: tripWith("/bad", 20, s3GetFrom("bad")), script: twoBuckets, call: s3GetFrom("bad"),
			circuitErr: true, unsent: true, inspect: triesAll(3, time.Second),
		},
		{
			name: "j key by host (default): \"good\" after \"bad\" opened", opts: opts(one, noWait, retryhttp.WithBreaker(pathBreaker())),
			prep: tripWith("", 20, s3GetFrom("bad")), script: twoBuckets, call: s3GetFrom("good"),
			circuitErr: true, unsent: true, inspect: triesAll(3, time.Second),
		},
	}, awsCircuitRows(s3Get, s3GetObject, 3)...)})
}
