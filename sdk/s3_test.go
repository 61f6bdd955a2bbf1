package sdk

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/retryhttp/retryhttp"
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

func s3GetObject(ctx context.Context, e env) error {
	out, err := newS3(e).GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("obj")})
	if err != nil {
		return err
	}
	defer out.Body.Close()
	_, err = io.Copy(io.Discard, out.Body)
	return err
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
	runSDK(t, sdkCase{name: "s3", typed: s3Typed, rows: []row{
		{
			name: "a defaults, real delays (GET)", real: true,
			script: Always(s3503), call: s3GetObject, status: 503, mayTrip: true,
		},
		{
			name: "a defaults, fast delays (GET)", opts: opts(fast),
			script: Always(s3503), call: s3GetObject, status: 503, promised: 3 * 4, want: 3 * 4,
		},
		{
			name: "b SDK off + retryhttp defaults (GET)", tries: 1,
			script: Always(s3503), call: s3GetObject, status: 503, promised: 4, want: 4,
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
	}})
}
