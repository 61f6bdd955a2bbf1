package sdk

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"
)

// The recipes of README.md and docs/sdks.md, as written, each against a
// loopback server that fails the way the recipe is for. Their clients take
// the server from where the SDKs read an endpoint (aws.Config, the
// environment), so that the recipes need not name it.

// recipeAWS returns the aws.Config a recipe's SDK clients are made from:
// the server as the endpoint.
func recipeAWS(srv *Server) aws.Config {
	return aws.Config{Region: awsRegion, Credentials: awsCreds, BaseEndpoint: aws.String(srv.URL)}
}

// pathStyle sends one S3 call path-style, as the loopback server needs.
func pathStyle(o *s3.Options) { o.UsePathStyle = true }

// recipeOpenAI points openai-go's clients at the server, through the
// environment variables the SDK reads.
func recipeOpenAI(t *testing.T, srv *Server) {
	t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1/")
	t.Setenv("OPENAI_API_KEY", "sk-test")
}

// README.md: under SDKs that retry, the transport makes one attempt per
// SDK try: an S3 GET and an OpenAI call answered 503 once are each retried
// by their SDK, and each try reaches the server once.
func TestRecipeUnderSDKs(t *testing.T) {
	srv := NewServer(t, ByPath(map[string]Script{
		"/bkt/obj":         FailThen(1, s3503, s3Get),
		"/v1/models/gpt-x": FailThen(1, openai503, openaiModel),
	}, Always(Reply{Status: 404})))
	recipeOpenAI(t, srv)
	cfg := recipeAWS(srv)
	// recipe: README.md 4
	hc := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithMaxAttempts(1))}
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.HTTPClient = hc })
	oai := openai.NewClient(option.WithHTTPClient(hc))
	// end recipe
	defer hc.CloseIdleConnections()
	_, err := s3c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("obj")}, pathStyle)
	require.NoError(t, err)
	_, err = oai.Models.Get(t.Context(), "gpt-x")
	require.NoError(t, err)
	byPath := map[string]int{}
	for _, r := range srv.Requests() {
		byPath[r.Path]++
	}
	assert.Equal(t, map[string]int{"/bkt/obj": 2, "/v1/models/gpt-x": 2}, byPath, "one request per SDK try")
}

// docs/sdks.md: stripe-go with its retries off, the transport's on. Built,
// not run: stripe-go reads its endpoint from its config only, and the
// recipe as written talks to api.stripe.com.
func Example_stripe() {
	apiKey := "sk_test_123"
	// recipe: docs/sdks.md 2
	hc := &http.Client{Transport: retryhttp.New(nil)}
	backends := stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		HTTPClient:        hc,
		MaxNetworkRetries: stripe.Int64(0), // retryhttp retries
	})
	sc := stripe.NewClient(apiKey, stripe.WithBackends(backends))
	// end recipe
	_ = sc
}

// docs/sdks.md: the AWS SDK keeps its retries, the transport makes one
// attempt per try, for S3 and DynamoDB alike.
func TestRecipeAWS(t *testing.T) {
	srv := NewServer(t, ByPath(map[string]Script{
		"/bkt/obj": FailThen(1, s3503, s3Get),
		"/":        FailThen(1, dynamo503, dynamoItem),
	}, Always(Reply{Status: 404})))
	cfg := recipeAWS(srv)
	// recipe: docs/sdks.md 3
	hc := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithMaxAttempts(1))}
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.HTTPClient = hc })
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.HTTPClient = hc })
	// end recipe
	defer hc.CloseIdleConnections()
	_, err := s3c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("obj")}, pathStyle)
	require.NoError(t, err)
	_, err = db.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String("tbl"),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "1"}}})
	require.NoError(t, err)
	assert.Len(t, srv.Requests(), 4, "two SDK tries each, one request per try")
}

// docs/sdks.md: openai-go keeps its retries over one attempt per try.
func TestRecipeOpenAI(t *testing.T) {
	srv := NewServer(t, FailThen(1, openai503, openaiModel))
	recipeOpenAI(t, srv)
	// recipe: docs/sdks.md 4
	hc := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithMaxAttempts(1))}
	client := openai.NewClient(option.WithHTTPClient(hc))
	// end recipe
	defer hc.CloseIdleConnections()
	_, err := client.Models.Get(t.Context(), "gpt-x")
	require.NoError(t, err)
	assert.Len(t, srv.Requests(), 2, "the SDK's two tries, one request each")
}

// docs/sdks.md: one call through an SDK gets one attempt per try, through
// its context, from a transport that would otherwise retry.
func TestRecipeOneCall(t *testing.T) {
	srv := NewServer(t, FailThen(2, s3503, s3Get))
	hc := &http.Client{Transport: retryhttp.New(nil)}
	defer hc.CloseIdleConnections()
	s3c := s3.NewFromConfig(recipeAWS(srv), func(o *s3.Options) { o.HTTPClient = hc; o.UsePathStyle = true })
	ctx, in := t.Context(), &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("obj")}
	// recipe: docs/sdks.md 5
	ctx = retryhttp.ContextWithOptions(ctx, retryhttp.WithMaxAttempts(1))
	out, err := s3c.GetObject(ctx, in) // each SDK try is sent exactly once
	// end recipe
	require.NoError(t, err)
	out.Body.Close()
	assert.Len(t, srv.Requests(), 3, "the SDK's three tries, one request each")
}

// docs/sdks.md: a request marked idempotent through its context is
// retried by the transport, a POST included.
func TestRecipeMarkIdempotent(t *testing.T) {
	srv := NewServer(t, FailThen(1, Reply{Status: 503}, Reply{Status: 200}))
	hc := &http.Client{Transport: retryhttp.New(nil)}
	defer hc.CloseIdleConnections()
	ctx := t.Context()
	// recipe: docs/sdks.md 6
	always := func(*http.Request) bool { return true }
	ctx = retryhttp.ContextWithOptions(ctx, retryhttp.WithIdempotentIf(always))
	// end recipe
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/charge", strings.NewReader("{}"))
	require.NoError(t, err)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Len(t, srv.Requests(), 2, "the POST retried once")
}

// docs/sdks.md: DynamoDB's reads are retried by the transport, its writes
// sent once, with the SDK's retries off.
func TestRecipeDynamoReads(t *testing.T) {
	srv := NewServer(t, func(r *Request) Reply {
		if r.N == 1 || strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".PutItem") {
			return dynamo503
		}
		return dynamoItem
	})
	cfg := recipeAWS(srv)
	// recipe: docs/sdks.md 7
	reads := func(r *http.Request) bool {
		switch r.Header.Get("X-Amz-Target") {
		case "DynamoDB_20120810.GetItem", "DynamoDB_20120810.Query",
			"DynamoDB_20120810.Scan", "DynamoDB_20120810.BatchGetItem":
			return true
		}
		return retryhttp.DefaultIdempotentIf(r)
	}
	hc := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithIdempotentIf(reads), retryhttp.WithBodyBuffer(1<<20))}
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.HTTPClient = hc
		o.Retryer = aws.NopRetryer{} // reads: up to 4 attempts; writes: once
	})
	// end recipe
	defer hc.CloseIdleConnections()
	key := map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "1"}}
	_, err := db.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String("tbl"), Key: key})
	require.NoError(t, err, "the read, retried by the transport")
	_, err = db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String("tbl"), Item: key})
	require.Error(t, err, "the write, sent once")
	assert.Len(t, srv.Requests(), 3, "the read twice, the write once")
}

// docs/sdks.md: with the local 503, an open circuit reaches the SDK as a
// 503 it handles its own way, marked as the transport's own.
func TestRecipeLocal503(t *testing.T) {
	srv := NewServer(t, Always(Reply{Status: 503}))
	// recipe: docs/sdks.md 9
	hc := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithMaxAttempts(1),
		retryhttp.WithCircuitOpenResponse(), retryhttp.WithMaxWait(0))}
	// end recipe
	defer hc.CloseIdleConnections()
	// The default breaker trips on failure that lasts its 2 s span.
	local := ""
	for start := time.Now(); local == "" && time.Since(start) < 10*time.Second; {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/x", nil)
		require.NoError(t, err)
		resp, err := hc.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		cancel()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		local = resp.Header.Get(localHeader)
	}
	assert.Equal(t, "circuit-open", local, "the open circuit's local 503")
}
