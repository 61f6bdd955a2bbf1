package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
)

// OpenAI's replies.
var (
	openai503 = Reply{Status: 503, Header: map[string]string{"Content-Type": "application/json", "X-Request-Id": "req_503"},
		Body: []byte(`{"error":{"message":"scripted 503","type":"server_error","param":null,"code":null}}`)}
	openaiModel = Reply{Status: 200, Header: map[string]string{"Content-Type": "application/json"},
		Body: []byte(`{"id":"gpt-4o-mini","object":"model","created":1700000000,"owned_by":"openai"}`)}
	openaiChat = Reply{Status: 200, Header: map[string]string{"Content-Type": "application/json"},
		Body: []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini",` +
			`"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)}
)

// newOpenAI builds an OpenAI client on e's *http.Client, pointed at the
// server, with e's tries (MaxRetries = tries-1).
func newOpenAI(e env) openai.Client {
	o := []option.RequestOption{
		option.WithAPIKey("sk-test"),
		option.WithBaseURL(e.srv.URL + "/v1/"),
		option.WithHTTPClient(e.hc),
	}
	if e.tries > 0 {
		o = append(o, option.WithMaxRetries(e.tries-1))
	}
	if !e.real {
		// The SDK backs off 0.5 s, then 1 s (less up to a quarter); its
		// cap bounds that. (It would also make a server's longer
		// Retry-After end the retries: the scripts send none.)
		o = append(o, option.WithMaxRetryDelay(time.Millisecond))
	}
	return openai.NewClient(o...)
}

func openaiGetModel(ctx context.Context, e env) error {
	c := newOpenAI(e)
	_, err := c.Models.Get(ctx, "gpt-4o-mini")
	return err
}

// openaiChatNew creates a chat completion, a POST, with the given
// Idempotency-Key ("" sends none: the SDK adds none of its own).
func openaiChatNew(key string) func(context.Context, env) error {
	return func(ctx context.Context, e env) error {
		c := newOpenAI(e)
		var o []option.RequestOption
		if key != "" {
			o = append(o, option.WithHeader("Idempotency-Key", key))
		}
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "gpt-4o-mini",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		}, o...)
		return err
	}
}

// openaiTyped checks that err is an *openai.Error for the status.
func openaiTyped(err error, status int) error {
	var oe *openai.Error
	if !errors.As(err, &oe) {
		return fmt.Errorf("not an *openai.Error: %v", err)
	}
	if oe.StatusCode != status {
		return fmt.Errorf("*openai.Error status %d, want %d", oe.StatusCode, status)
	}
	return nil
}

// openaiLocalTyped checks that the local 503 of an open circuit reaches
// the caller as an *openai.Error parsed from its JSON body.
func openaiLocalTyped(err error, status int) error {
	if err := openaiTyped(err, status); err != nil {
		return err
	}
	var oe *openai.Error
	errors.As(err, &oe)
	if oe.Code != "circuit_open" || oe.Type != "api_error" || !strings.Contains(oe.Message, "circuit open") {
		return fmt.Errorf("*openai.Error not parsed from the local body: code %q type %q message %q", oe.Code, oe.Type, oe.Message)
	}
	return nil
}

// retryCountPerTry asserts that X-Stainless-Retry-Count numbers the
// requests 0, 1, …: every request was an SDK try.
func retryCountPerTry(t *testing.T, reqs []Request) {
	for i, r := range reqs {
		assert.Equal(t, fmt.Sprint(i), r.RetryCount, "request %d: X-Stainless-Retry-Count", r.N)
	}
}

func TestOpenAI(t *testing.T) {
	one := retryhttp.WithMaxAttempts(1)
	runSDK(t, sdkCase{name: "openai", typed: openaiTyped, rows: []row{
		{
			name: "a defaults, real delays (GET)", real: true,
			script: Always(openai503), call: openaiGetModel, status: 503, mayTrip: true,
		},
		{
			name: "a defaults, fast delays (GET)", opts: opts(fast),
			script: Always(openai503), call: openaiGetModel, status: 503, promised: 3*4 + rideOut, want: 3*4 + rideOut,
		},
		{
			name: "b SDK off + retryhttp defaults (GET)", tries: 1,
			script: Always(openai503), call: openaiGetModel, status: 503, promised: 4 + rideOut, want: 4 + rideOut,
		},
		{
			name: "c retryhttp 1 attempt + SDK defaults (GET)", opts: opts(one),
			script: Always(openai503), call: openaiGetModel, status: 503, promised: 3, want: 3,
			check: retryCountPerTry,
		},
		{
			// The SDK sets no Idempotency-Key on a chat completion, so
			// retryhttp sends it once...
			name: "d POST, no key, SDK off + retryhttp defaults", tries: 1,
			script: Always(openai503), call: openaiChatNew(""), status: 503, promised: 4, want: 1,
			check: noHeader("Idempotency-Key", idempotencyKey),
		},
		{
			// ...while the SDK itself retries that POST, keyless.
			name: "d POST, no key, SDK defaults + retryhttp defaults, fast delays", opts: opts(fast),
			script: Always(openai503), call: openaiChatNew(""), status: 503, promised: 3 * 4, want: 3,
			check: checks(noHeader("Idempotency-Key", idempotencyKey), retryCountPerTry, sameBody),
		},
		{
			name: "d POST + Idempotency-Key, SDK off + retryhttp defaults", tries: 1,
			script: Always(openai503), call: openaiChatNew("chat-42"), status: 503, promised: 4 + rideOut, want: 4 + rideOut,
			check: checks(sameHeader("Idempotency-Key", idempotencyKey), sameBody),
		},
		{
			name:   "e 503,503,200 (GET), both defaults",
			script: FailThen(2, openai503, openaiModel), call: openaiGetModel, promised: 4, want: 3,
		},
		{
			name:   "e 503,503,200 (POST + Idempotency-Key), both defaults",
			script: FailThen(2, openai503, openaiChat), call: openaiChatNew("chat-43"), promised: 4, want: 3,
			check: checks(sameHeader("Idempotency-Key", idempotencyKey), sameBody),
		},

		// The recipe: the SDK's retries on (3 tries, keyless POSTs
		// included, Retry-After-Ms and X-Should-Retry read), retryhttp
		// sending each try once.
		{
			name: "r recipe: SDK 3 + retryhttp 1: chat POST, no key, 503 forever", opts: opts(one), real: true,
			script: Always(openai503), call: openaiChatNew(""), status: 503, promised: 3, want: 3,
			check: checks(noHeader("Idempotency-Key", idempotencyKey), retryCountPerTry, sameBody),
		},
		{
			name: "r recipe: SDK 3 + retryhttp 1: chat POST + key, 503 forever", opts: opts(one), real: true,
			script: Always(openai503), call: openaiChatNew("chat-44"), status: 503, promised: 3, want: 3,
			check: checks(sameHeader("Idempotency-Key", idempotencyKey), retryCountPerTry, sameBody),
		},
		{
			name: "r recipe: SDK 3 + retryhttp 1: chat POST, 503,503,200", opts: opts(one), real: true,
			script: FailThen(2, openai503, openaiChat), call: openaiChatNew(""), promised: 3, want: 3,
			check: retryCountPerTry,
		},

		// The per-request form under a transport of 4.
		{
			name: "p per-request 1 attempt, transport 4, SDK defaults: GET, 503 forever", real: true,
			ctx:    perRequest(retryhttp.WithMaxAttempts(1)),
			script: Always(openai503), call: openaiGetModel, status: 503, promised: 3, want: 3,
			check: retryCountPerTry, inspect: oncePerTry,
		},
		{
			name: "p per-request 1 attempt, transport 4, SDK defaults: chat POST + key, 503 forever", real: true,
			ctx:    perRequest(retryhttp.WithMaxAttempts(1)),
			script: Always(openai503), call: openaiChatNew("chat-45"), status: 503, promised: 3, want: 3,
			check: retryCountPerTry, inspect: oncePerTry,
		},

		// Idempotency through the context.
		{
			name: "i chat POST, no key, idempotent by context, SDK off + retryhttp 4", tries: 1, opts: opts(fast),
			ctx:    perRequest(retryhttp.WithIdempotentIf(always)),
			script: Always(openai503), call: openaiChatNew(""), status: 503, promised: 4 + rideOut, want: 4 + rideOut,
			check: checks(noHeader("Idempotency-Key", idempotencyKey), sameBody),
		},
		{
			name: "i GET, not idempotent by context, SDK off + retryhttp 4", tries: 1, opts: opts(fast),
			ctx:    perRequest(retryhttp.WithIdempotentIf(never)),
			script: Always(openai503), call: openaiGetModel, status: 503, want: 1,
		},

		// An open circuit. With the local 503 the SDK parses its error and
		// waits exactly Retry-After-Ms, unless that exceeds its
		// MaxRetryDelay: then it stops at once. Without it the SDK sees a
		// connection error and retries after its own backoff.
		{
			name: "k local 503, circuit open: SDK off", tries: 1,
			opts: opts(one, retryhttp.WithCircuitOpenResponse(), noWait, retryhttp.WithBreaker(quickBreaker(shortOpen))),
			prep: tripHost, script: withTrip(Always(openaiModel)), call: openaiGetModel,
			status: 503, typed: openaiLocalTyped, unsent: true, inspect: triesN(1),
		},
		{
			name: "k local 503, circuit open 1 s: SDK defaults, real delays, server back", real: true,
			opts: opts(one, retryhttp.WithCircuitOpenResponse(), noWait, retryhttp.WithBreaker(quickBreaker(shortOpen))),
			prep: tripHost, script: withTrip(Always(openaiModel)), call: openaiGetModel,
			status: 503, typed: orLocal(openaiLocalTyped), inspect: inspects(servedOrRefused, backsOff("Retry-After-Ms", time.Millisecond, time.Second)),
		},
		{
			name: "k local 503, circuit open: SDK defaults, MaxRetryDelay 1 ms",
			opts: opts(one, retryhttp.WithCircuitOpenResponse(), noWait, retryhttp.WithBreaker(quickBreaker(shortOpen))),
			prep: tripHost, script: withTrip(Always(openaiModel)), call: openaiGetModel,
			status: 503, typed: openaiLocalTyped, unsent: true, inspect: triesN(1),
		},
		{
			name: "k no local 503, circuit open: SDK defaults, real delays", real: true,
			opts: opts(one, noWait, retryhttp.WithBreaker(quickBreaker(longOpen))),
			prep: tripHost, script: withTrip(Always(openaiModel)), call: openaiGetModel,
			circuitErr: true, unsent: true, inspect: triesAll(3, 2*time.Second),
		},
	}})
}
