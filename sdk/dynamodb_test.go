package sdk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/retryhttp/retryhttp"
)

// DynamoDB's replies: JSON 1.0, the error's type in __type. The 503 carries
// InternalServerError, a modeled error, so the SDK returns a typed Go error.
var (
	dynamo503 = Reply{Status: 503, Header: map[string]string{"Content-Type": "application/x-amz-json-1.0", "X-Amzn-Requestid": "REQ503"},
		Body: []byte(`{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"scripted 503"}`)}
	dynamoItem = Reply{Status: 200, Header: map[string]string{"Content-Type": "application/x-amz-json-1.0", "X-Amzn-Requestid": "REQ200"},
		Body: []byte(`{"Item":{"id":{"S":"1"},"name":{"S":"one"}}}`)}
)

// newDynamo builds a DynamoDB client on e's *http.Client, pointed at the
// server.
func newDynamo(e env) *dynamodb.Client {
	o := dynamodb.Options{
		Region:       awsRegion,
		Credentials:  awsCreds,
		HTTPClient:   e.hc,
		BaseEndpoint: aws.String(e.srv.URL),
	}
	awsRetry(e, &o.Retryer, &o.RetryMaxAttempts)
	return dynamodb.New(o)
}

// dynamoGetItem is a read, sent as a POST with X-Amz-Target.
func dynamoGetItem(ctx context.Context, e env) error {
	_, err := newDynamo(e).GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String("tbl"),
		Key:       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "1"}},
	})
	return err
}

// dynamoPutItem is a write, sent as a POST with X-Amz-Target.
func dynamoPutItem(ctx context.Context, e env) error {
	_, err := newDynamo(e).PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String("tbl"),
		Item:      map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "1"}, "name": &types.AttributeValueMemberS{Value: "one"}},
	})
	return err
}

// dynamoQuery is a read, sent as a POST with X-Amz-Target.
func dynamoQuery(ctx context.Context, e env) error {
	_, err := newDynamo(e).Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String("tbl"),
		KeyConditionExpression:    aws.String("id = :id"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":id": &types.AttributeValueMemberS{Value: "1"}},
	})
	return err
}

// dynamoTyped checks for the modeled *types.InternalServerError beside the
// ResponseError with the status.
func dynamoTyped(err error, status int) error {
	var ise *types.InternalServerError
	if !errors.As(err, &ise) {
		return fmt.Errorf("no *types.InternalServerError in %v", err)
	}
	return awsTyped(err, status, "InternalServerError")
}

// dynamoReads is the read recipe's idempotency test: the default rule,
// and the POSTs whose X-Amz-Target is one of DynamoDB's reads.
func dynamoReads(r *http.Request) bool {
	switch r.Header.Get("X-Amz-Target") {
	case "DynamoDB_20120810.GetItem", "DynamoDB_20120810.Query",
		"DynamoDB_20120810.Scan", "DynamoDB_20120810.BatchGetItem":
		return true
	}
	return retryhttp.DefaultIdempotentIf(r)
}

var target = func(r Request) string { return r.Target }

func TestDynamoDB(t *testing.T) {
	one := retryhttp.WithMaxAttempts(1)
	idem := retryhttp.WithIdempotentIf(dynamoReads)
	buffer := retryhttp.WithBodyBuffer(1 << 20)
	runSDK(t, sdkCase{name: "dynamodb", typed: dynamoTyped, rows: append([]row{
		{
			// A POST without Idempotency-Key: retryhttp sends each SDK try
			// once, and the SDK's 4 tries are all there is.
			name: "a defaults, real delays (GetItem)", real: true,
			script: Always(dynamo503), call: dynamoGetItem, status: 503, mayTrip: true, want: 4,
		},
		{
			name: "b SDK off + retryhttp defaults (GetItem)", tries: 1,
			script: Always(dynamo503), call: dynamoGetItem, status: 503, promised: 4, want: 1,
		},
		{
			name: "c retryhttp 1 attempt + SDK defaults (GetItem)", opts: opts(one),
			script: Always(dynamo503), call: dynamoGetItem, status: 503, promised: 4, want: 4,
			check: sdkRequestPerTry,
		},
		{
			// The recipe alone: GetItem may be retried, but the SDK's body
			// has no GetBody, so retryhttp still sends it once.
			name: "f WithIdempotentIf(reads), SDK off", tries: 1, opts: opts(idem),
			script: Always(dynamo503), call: dynamoGetItem, status: 503, promised: 4, want: 1,
		},
		{
			name: "f read recipe: WithIdempotentIf(reads) + WithBodyBuffer, SDK off", tries: 1, opts: opts(idem, buffer),
			script: Always(dynamo503), call: dynamoGetItem, status: 503, promised: 4 + rideOut, want: 4 + rideOut,
			check: checks(sameBody, payloadHashes, sameHeader("X-Amz-Target", target),
				sameHeader("Authorization", authorization), sameHeader("amz-sdk-request", sdkRequest)),
		},
		{
			// Both layers retry: 4 x 4, less what the budget refuses.
			name: "f WithIdempotentIf + WithBodyBuffer, SDK defaults, fast delays", opts: opts(idem, buffer, fast),
			script: Always(dynamo503), call: dynamoGetItem, status: 503, promised: 4*4 + rideOut,
		},
		{
			name: "f WithIdempotentIf + WithBodyBuffer, SDK defaults, 503,503,200", opts: opts(idem, buffer),
			script: FailThen(2, dynamo503, dynamoItem), call: dynamoGetItem, promised: 4, want: 3,
			check: checks(sameBody, sameHeader("amz-sdk-request", sdkRequest)),
		},
		{
			name: "f read recipe, SDK off: Query, 503 forever", tries: 1, opts: opts(idem, buffer, fast),
			script: Always(dynamo503), call: dynamoQuery, status: 503, promised: 4 + rideOut, want: 4 + rideOut,
			check: checks(sameBody, sameHeader("X-Amz-Target", target)),
		},
		{
			// A write is not in the recipe: sent once.
			name: "f read recipe, SDK off: PutItem, 503 forever", tries: 1, opts: opts(idem, buffer, fast),
			script: Always(dynamo503), call: dynamoPutItem, status: 503, want: 1,
		},

		// The recipe: the SDK's retries on (4 tries, each signed afresh),
		// retryhttp sending each try once; writes and reads alike.
		{
			name: "r recipe: SDK 4 + retryhttp 1: GetItem, 503,503,200", opts: opts(one),
			script: FailThen(2, dynamo503, dynamoItem), call: dynamoGetItem, promised: 4, want: 3,
			check: sdkRequestPerTry,
		},
		{
			name: "r recipe: SDK 4 + retryhttp 1: GetItem, 503 forever", opts: opts(one),
			script: Always(dynamo503), call: dynamoGetItem, status: 503, promised: 4, want: 4,
			check: sdkRequestPerTry,
		},
		{
			name: "r recipe: SDK 4 + retryhttp 1: PutItem, 503 forever", opts: opts(one),
			script: Always(dynamo503), call: dynamoPutItem, status: 503, promised: 4, want: 4,
			check: checks(sameBody, sdkRequestPerTry),
		},

		// The per-request form under a transport of 4.
		{
			name:   "p per-request 1 attempt, transport 4, SDK defaults: GetItem, 503 forever",
			ctx:    perRequest(retryhttp.WithMaxAttempts(1)),
			script: Always(dynamo503), call: dynamoGetItem, status: 503, promised: 4, want: 4,
			check: sdkRequestPerTry, inspect: oncePerTry,
		},

		// Idempotency through the context: a write marked idempotent is
		// retried once its body can be replayed, which for an AWS body
		// takes the buffer (a per-request option too).
		{
			name: "i PutItem, idempotent by context + WithBodyBuffer, SDK off + retryhttp 4", tries: 1, opts: opts(fast),
			ctx:    perRequest(retryhttp.WithIdempotentIf(always), retryhttp.WithBodyBuffer(1<<20)),
			script: Always(dynamo503), call: dynamoPutItem, status: 503, promised: 4 + rideOut, want: 4 + rideOut,
			check: checks(sameBody, payloadHashes, sameHeader("Authorization", authorization)),
		},
		{
			name: "i PutItem, idempotent by context, no buffer, SDK off + retryhttp 4", tries: 1, opts: opts(fast),
			ctx:    perRequest(retryhttp.WithIdempotentIf(always)),
			script: Always(dynamo503), call: dynamoPutItem, status: 503, want: 1,
		},
		{
			name: "i GetItem, not idempotent by context, read recipe, SDK off", tries: 1, opts: opts(idem, buffer, fast),
			ctx:    perRequest(retryhttp.WithIdempotentIf(never)),
			script: Always(dynamo503), call: dynamoGetItem, status: 503, want: 1,
		},
	}, awsCircuitRows(dynamoItem, dynamoGetItem, 4)...)})
}
