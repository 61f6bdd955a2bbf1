package sdk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
)

// Settings shared by the AWS clients: static credentials and a fixed region,
// so that nothing is read from the environment or ~/.aws.
const awsRegion = "us-east-1"

var awsCreds = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", Source: "sdk test"}, nil
})

// awsRetry sets a service client's retry options from e.tries: 0 keeps the
// service's default retryer (S3: 3 attempts, base 50 ms; DynamoDB: 4
// attempts, base 25 ms: short enough to keep, so e.real changes nothing),
// 1 is aws.NopRetryer, n is n attempts.
func awsRetry(e env, retryer *aws.Retryer, maxAttempts *int) {
	switch {
	case e.tries == 1:
		*retryer = aws.NopRetryer{}
	case e.tries > 1:
		*maxAttempts = e.tries
	}
}

// awsTyped checks that err carries the SDK's *awshttp.ResponseError with
// the status, and a smithy.APIError with the code.
func awsTyped(err error, status int, code string) error {
	var re *awshttp.ResponseError
	if !errors.As(err, &re) {
		return fmt.Errorf("no *awshttp.ResponseError in %v", err)
	}
	if re.HTTPStatusCode() != status {
		return fmt.Errorf("*awshttp.ResponseError status %d, want %d", re.HTTPStatusCode(), status)
	}
	var api smithy.APIError
	if !errors.As(err, &api) {
		return fmt.Errorf("no smithy.APIError in %v", err)
	}
	if api.ErrorCode() != code {
		return fmt.Errorf("smithy.APIError code %q, want %q", api.ErrorCode(), code)
	}
	return nil
}

// awsLocalTyped checks that the local 503 of an open circuit reaches the
// caller as the SDK's *awshttp.ResponseError with the status, and a
// smithy.APIError (whatever code the service's deserializer made of the
// JSON body).
func awsLocalTyped(err error, status int) error {
	var re *awshttp.ResponseError
	if !errors.As(err, &re) {
		return fmt.Errorf("no *awshttp.ResponseError in %v", err)
	}
	if re.HTTPStatusCode() != status {
		return fmt.Errorf("*awshttp.ResponseError status %d, want %d", re.HTTPStatusCode(), status)
	}
	if re.Response.Header.Get(localHeader) != "circuit-open" {
		return fmt.Errorf("the 503 is not the local one: %s %q", localHeader, re.Response.Header.Get(localHeader))
	}
	var api smithy.APIError
	if !errors.As(err, &api) {
		return fmt.Errorf("no smithy.APIError in %v", err)
	}
	return nil
}

// awsAPICode logs the smithy.APIError code and message of the call's
// error, if any.
func awsAPICode(t *testing.T, o observed) {
	var api smithy.APIError
	if errors.As(o.err, &api) {
		t.Logf("smithy.APIError: code %q, message %q, fault %v", api.ErrorCode(), api.ErrorMessage(), api.ErrorFault())
	}
}

// The AWS request fields, for sameHeader.
var (
	authorization = func(r Request) string { return r.Authorization }
	amzDate       = func(r Request) string { return r.AmzDate }
	sdkRequest    = func(r Request) string { return r.SDKRequest }
	invocationID  = func(r Request) string { return r.InvocationID }
)

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// payloadHashes asserts that, where x-amz-content-sha256 is a hash rather
// than a marker such as UNSIGNED-PAYLOAD, it is the hash of the body that
// arrived. (S3 sends the header; DynamoDB signs the hash without it.)
func payloadHashes(t *testing.T, reqs []Request) {
	for _, r := range reqs {
		if hexSHA256.MatchString(r.ContentSHA256) {
			sum := sha256.Sum256(r.Body)
			assert.Equal(t, hex.EncodeToString(sum[:]), r.ContentSHA256, "request %d: body does not match its signed hash", r.N)
		}
	}
}

// logAWS logs the signing fields of each request: which changed between
// attempts is part of what the rows measure.
func logAWS(t *testing.T, reqs []Request) {
	for _, r := range reqs {
		sig := r.Authorization
		if i := len(sig) - 16; i > 0 {
			sig = "…" + sig[i:]
		}
		t.Logf("request %d: %s %s amz-sdk-request=%q date=%s sha256=%.16s… sig=%s len=%d",
			r.N, r.Method, r.Path, r.SDKRequest, r.AmzDate, r.ContentSHA256, sig, len(r.Body))
	}
}

// signs asserts that every request's SigV4 signature covers the header:
// a header the SDK changes per try must then be signed afresh per try.
func signs(header string) func(*testing.T, []Request) {
	return func(t *testing.T, reqs []Request) {
		for _, r := range reqs {
			assert.Regexp(t, `SignedHeaders=([a-z0-9-]+;)*`+regexp.QuoteMeta(header)+`[;,]`, r.Authorization, "request %d", r.N)
		}
	}
}

// sdkRequestPerTry asserts that the SDK numbered its own tries 1, 2, …
// in amz-sdk-request, one number per request: every request was an SDK try.
func sdkRequestPerTry(t *testing.T, reqs []Request) {
	for i, r := range reqs {
		assert.Regexp(t, fmt.Sprintf(`^attempt=%d; max=\d+$`, i+1), r.SDKRequest, "request %d", r.N)
	}
}

// awsCircuitRows are the open-circuit rows of every AWS client. With the
// local 503 the SDK gets its typed 503 and waits what X-Amz-Retry-After
// says (clamped to [backoff, backoff+5 s]) before its next try, which finds
// the circuit half-open and reaches the server. Without it the SDK sees a
// transport error and retries after its own backoff, refused each time.
// ok is the service's answer once the server is back, call the operation,
// sdkTries the client's default number of attempts.
func awsCircuitRows(ok Reply, call func(context.Context, env) error, sdkTries int) []row {
	one := retryhttp.WithMaxAttempts(1)
	return []row{
		{
			name: "k local 503, circuit open: SDK off", tries: 1,
			opts: opts(one, retryhttp.WithCircuitOpenResponse(), noWait, retryhttp.WithBreaker(quickBreaker(shortOpen))),
			prep: tripHost, script: withTrip(Always(ok)), call: call,
			status: 503, typed: awsLocalTyped, unsent: true, inspect: inspects(triesN(1), awsAPICode),
		},
		{
			name: "k local 503, circuit open 1 s: SDK defaults, server back",
			opts: opts(one, retryhttp.WithCircuitOpenResponse(), noWait, retryhttp.WithBreaker(quickBreaker(shortOpen))),
			prep: tripHost, script: withTrip(Always(ok)), call: call,
			status: 503, typed: orLocal(awsLocalTyped), inspect: inspects(servedOrRefused, backsOff("X-Amz-Retry-After", time.Millisecond, 5*time.Second)),
		},
		{
			name: "k no local 503, circuit open: SDK defaults",
			opts: opts(one, noWait, retryhttp.WithBreaker(quickBreaker(longOpen))),
			prep: tripHost, script: withTrip(Always(ok)), call: call,
			circuitErr: true, unsent: true, inspect: triesAll(sdkTries, time.Second),
		},
	}
}
