package retryhttp

// Fuzz targets for the two parts of the package that take arbitrary input:
// the policies' arithmetic, and the attempt loop driven by whatever a next
// RoundTripper may return (the Retry-After parser's, FuzzRetryAfter, is in
// internal/header). Their seed corpora live
// in testdata/fuzz/<FuzzName>/ and run with every `go test`; to search for
// new failures, run one target at a time, for example
//
//	go test -run '^$' -fuzz '^FuzzRoundTrip$' -fuzztime 1000000x -parallel 2 .
//
// Everything here is self-contained (names start with fz) so that it does
// not depend on the helpers of the other test files.

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp/internal/attempt"
)

// ---------------------------------------------------------------------------
// FuzzPolicyDelay

// fzDefaults applies the documented defaults to fields <= 0.
func fzDefaults(base, maxd time.Duration) (int64, int64) {
	if base <= 0 {
		base = 200 * time.Millisecond
	}
	if maxd <= 0 {
		maxd = 30 * time.Second
	}
	return int64(base), int64(maxd)
}

// fzBound is min(Cap, Base·2^(n−1)) with defaults, n < 1 counting as 1,
// computed in arbitrary precision.
func fzBound(n int, base, maxd time.Duration) time.Duration {
	b, c := fzDefaults(base, maxd)
	n = max(n, 1)
	// Base >= 1, so from a shift of 63 on the product passes any Cap.
	x := new(big.Int).Lsh(big.NewInt(b), uint(min(n-1, 64)))
	if x.Cmp(big.NewInt(c)) > 0 {
		return time.Duration(c)
	}
	return time.Duration(x.Int64())
}

// fzDecorrelated is the closed interval DecorrelatedJitter documents:
// [Base, max(Base, min(Cap, 3·max(prev, Base)))], a Cap below Base raised to
// Base.
func fzDecorrelated(base, maxd, prev time.Duration) (time.Duration, time.Duration) {
	b, c := fzDefaults(base, maxd)
	c = max(c, b)
	p := max(int64(prev), b)
	hi := new(big.Int).Mul(big.NewInt(p), big.NewInt(3))
	if hi.Cmp(big.NewInt(c)) > 0 {
		hi.SetInt64(c)
	}
	return time.Duration(b), time.Duration(max(b, hi.Int64()))
}

// FuzzPolicyDelay checks every policy's Delay against its documented range,
// for any retry number, previous delay, Base and Cap.
func FuzzPolicyDelay(f *testing.F) {
	f.Add(1, int64(0), int64(0), int64(0))
	f.Add(64, int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64))
	f.Add(-5, int64(-1), int64(time.Second), int64(500*time.Millisecond))
	f.Fuzz(func(t *testing.T, n int, prev, base, maxd int64) {
		p, b, c := time.Duration(prev), time.Duration(base), time.Duration(maxd)
		bound := fzBound(n, b, c)
		if bound <= 0 {
			t.Fatalf("test bug: bound(%d, %d, %d) = %d", n, b, c, bound)
		}

		if d := (FullJitter{Base: b, Cap: c}).Delay(n, p); d < 0 || d >= bound {
			t.Fatalf("FullJitter{%d, %d}.Delay(%d, %d) = %d, want in [0, %d)", b, c, n, p, d, bound)
		}
		if d := (EqualJitter{Base: b, Cap: c}).Delay(n, p); d < bound/2 || d >= bound {
			t.Fatalf("EqualJitter{%d, %d}.Delay(%d, %d) = %d, want in [%d, %d)", b, c, n, p, d, bound/2, bound)
		}
		if d := (Exponential{Base: b, Cap: c}).Delay(n, p); d != bound {
			t.Fatalf("Exponential{%d, %d}.Delay(%d, %d) = %d, want %d", b, c, n, p, d, bound)
		}
		lo, hi := fzDecorrelated(b, c, p)
		if d := (DecorrelatedJitter{Base: b, Cap: c}).Delay(n, p); d < lo || d > hi {
			t.Fatalf("DecorrelatedJitter{%d, %d}.Delay(%d, %d) = %d, want in [%d, %d]", b, c, n, p, d, lo, hi)
		}
		if d := (immediate{}).Delay(n, p); d != 0 {
			t.Fatalf("immediate{}.Delay(%d, %d) = %d, want 0", n, p, d)
		}
	})
}

// fzAllDigits reports a non-empty string of ASCII digits.
func fzAllDigits(s string) bool {
	return s != "" && strings.TrimLeft(s, "0123456789") == ""
}

// ---------------------------------------------------------------------------
// FuzzRoundTrip

// What the fake next returns for one attempt.
const (
	fzKindErr  = 4 // nil and a plain transport error (retryable)
	fzKindBoth = 5 // a response and an error together: a broken next
	fzKindNil  = 6 // nil, nil: a broken next
	fzKindCert = 7 // nil and a certificate error (not retryable)
	// kinds 0–3: a response with the step's status
)

type fzStep struct {
	kind   int
	status int
	ra     []string // the Retry-After header's values; nil: none
	big    bool     // a body larger than the 64 KiB drain limit
}

func (s fzStep) isResponse() bool { return s.kind < fzKindErr }

// retryable is what DefaultRetryIf makes of the step, from the documented rules.
func (s fzStep) retryable() bool {
	switch s.kind {
	case fzKindCert:
		return false
	case fzKindErr, fzKindBoth, fzKindNil:
		return true
	}
	switch s.status {
	case 408, 429, 500, 502, 503, 504:
		return true
	}
	return false
}

var fzStatuses = [...]int{200, 201, 204, 301, 304, 400, 404, 408, 429, 500, 501, 502, 503, 504, 505, 599}

// fzErrs[i] and fzCertErrs[i] are what attempt i+1 fails with: distinct
// values, so that the error returned can be traced to its attempt.
var fzErrs, fzCertErrs = func() (plain, cert []error) {
	for i := range 16 {
		plain = append(plain, fmt.Errorf("fz: connection reset on attempt %d", i+1))
		cert = append(cert, fmt.Errorf("fz: attempt %d: %w", i+1, x509.UnknownAuthorityError{}))
	}
	return plain, cert
}()

var errFzGetBody = errors.New("fz: GetBody fails")

var fzBigBody = strings.Repeat("b", 70_000)

// fzRespBody is a response body that counts what was read from it and how
// often it was closed.
type fzRespBody struct {
	r      *strings.Reader
	size   int
	read   atomic.Int64
	closed atomic.Int32
}

func (b *fzRespBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func (b *fzRespBody) Close() error { b.closed.Add(1); return nil }

// fzReqBody is a request body, the caller's or one GetBody made, that counts
// how often it was closed.
type fzReqBody struct {
	r      *strings.Reader
	closed atomic.Int32
}

func (b *fzReqBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *fzReqBody) Close() error               { b.closed.Add(1); return nil }

// fzHanded is one response the fake handed out.
type fzHanded struct {
	resp *http.Response
	body *fzRespBody
	step fzStep
}

// fzSent is what the fake saw of one attempt.
type fzSent struct {
	req     *http.Request
	method  string
	idemKey []string
	body    io.ReadCloser // the body field as it arrived
	content []byte        // nil when there was no body
}

// fzNext is the fake next RoundTripper: attempt i is answered by step
// min(i, len-1); an empty script answers 200. Like http.Transport, it reads
// and closes every request body.
type fzNext struct {
	steps   []fzStep
	sent    []fzSent
	handed  []fzHanded
	results []fzResult // what each attempt returned, as the transport sees it
}

type fzResult struct {
	resp *http.Response
	err  error
}

func (n *fzNext) step(i int) fzStep {
	if len(n.steps) == 0 {
		return fzStep{status: 200}
	}
	return n.steps[min(i, len(n.steps)-1)]
}

func (n *fzNext) RoundTrip(req *http.Request) (*http.Response, error) {
	i := len(n.sent)
	s := fzSent{req: req, method: req.Method, idemKey: req.Header["Idempotency-Key"], body: req.Body}
	if req.Body != nil {
		s.content, _ = io.ReadAll(req.Body)
		if s.content == nil {
			s.content = []byte{}
		}
		_ = req.Body.Close()
	}
	n.sent = append(n.sent, s)
	st := n.step(i)
	var (
		resp *http.Response
		err  error
	)
	switch st.kind {
	case fzKindErr:
		err = fzErrs[min(i, len(fzErrs)-1)]
	case fzKindCert:
		err = fzCertErrs[min(i, len(fzCertErrs)-1)]
	case fzKindNil:
	default:
		body := fzBigBody
		if !st.big {
			body = "response " + strconv.Itoa(i+1)
		}
		rb := &fzRespBody{r: strings.NewReader(body), size: len(body)}
		resp = &http.Response{
			Status:     strconv.Itoa(st.status) + " " + http.StatusText(st.status),
			StatusCode: st.status,
			Proto:      "HTTP/1.1",
			ProtoMajor: 1,
			ProtoMinor: 1,
			Header:     http.Header{},
			Body:       rb,
			Request:    req,
		}
		if st.ra != nil {
			resp.Header["Retry-After"] = st.ra
		}
		n.handed = append(n.handed, fzHanded{resp: resp, body: rb, step: st})
		if st.kind == fzKindBoth {
			err = fzErrs[min(i, len(fzErrs)-1)]
		}
	}
	n.results = append(n.results, fzResult{resp, err})
	return resp, err
}

// fzConfig is one fuzzed request and transport.
type fzConfig struct {
	method      string
	idemKey     []string // nil: no header
	idemRawKey  bool     // the key is set under the non-canonical "idempotency-key", which Header.Get does not see
	body        int      // 0 nil, 1 http.NoBody, 2 with GetBody, 3 without GetBody
	payload     string
	maxAttempts int
	bodyBuffer  int64
	budget      int // -1: none; 0..5: exactly that many retries; 6: a default budget
	breaker     bool
	tHooks      bool
	rHooks      bool
	timeout     bool
	getBodyFail int // the GetBody call that fails; 0: none
	canceled    bool
}

var fzMethods = [...]string{"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE", "POST", "PATCH", "", "CONNECT", "PROPFIND", "get", "POST", "PATCH", "GET", "PUT"}

func fzDecode(opts uint32) fzConfig {
	c := fzConfig{method: fzMethods[opts&15]}
	switch opts >> 4 & 3 {
	case 1:
		c.idemKey = []string{"key-1"}
	case 2:
		c.idemKey = []string{""} // present but empty: not a key
	case 3:
		c.idemKey, c.idemRawKey = []string{"key-1"}, true
	}
	c.body = int(opts >> 6 & 3)
	c.maxAttempts = 1 + int(opts>>8&7)%6
	c.payload = strings.Repeat("payload.", 8)[:opts>>24&63]
	switch opts >> 11 & 3 {
	case 1:
		c.bodyBuffer = 1
	case 2:
		c.bodyBuffer = int64(len(c.payload)) // fits exactly; 0 (off) for an empty payload
	case 3:
		c.bodyBuffer = 1 << 20
	}
	switch v := int(opts >> 13 & 7); v {
	case 0:
		c.budget = -1
	case 1:
		c.budget = 6
	default:
		c.budget = v - 2
	}
	c.breaker = opts>>16&1 != 0
	c.tHooks = opts>>17&1 != 0
	c.rHooks = opts>>18&1 != 0
	c.timeout = opts>>19&1 != 0
	c.getBodyFail = int(opts >> 20 & 7)
	c.canceled = opts>>30&1 != 0
	return c
}

// fzScript decodes up to six steps, two bytes each: a kind byte (bits 0–2
// the kind, bit 3 a Retry-After header, bit 4 a large body, bit 5 a second
// Retry-After value after the first) and a status byte. The header values
// are taken in turn from ra, split at '|'.
func fzScript(script []byte, ra string) []fzStep {
	vals := strings.Split(ra, "|")
	next := 0
	take := func() string {
		v := vals[next%len(vals)]
		next++
		return v
	}
	var steps []fzStep
	for i := 0; i+1 < len(script) && len(steps) < 6; i += 2 {
		k, s := script[i], script[i+1]
		st := fzStep{kind: int(k & 7), big: k&16 != 0}
		if s < 64 {
			st.status = fzStatuses[s%16]
		} else {
			st.status = 200 + (int(s)-64)*2
		}
		if k&8 != 0 {
			st.ra = []string{take()}
			if k&32 != 0 {
				st.ra = append(st.ra, take())
			}
		}
		steps = append(steps, st)
	}
	return steps
}

// fzHookLog counts the hooks called for one request.
type fzHookLog struct {
	starts  []Event
	dones   []Event
	retries []Event
	giveUps []Event
}

func (l *fzHookLog) hooks() *Hooks {
	return &Hooks{
		AttemptStart:   func(i Event) { l.starts = append(l.starts, i) },
		AttemptDone:    func(i Event) { l.dones = append(l.dones, i) },
		RetryScheduled: func(i Event) { l.retries = append(l.retries, i) },
		GiveUp:         func(i Event) { l.giveUps = append(l.giveUps, i) },
	}
}

// fzModel is what the package documentation says RoundTrip does with a
// config and a script: how many attempts reach next, and the reasons it may
// stop for (empty: it returns an answer that is not a failure).
func fzModel(c fzConfig, steps func(int) fzStep) (calls int, reasons []Reason) {
	key := ""
	if c.idemKey != nil && !c.idemRawKey {
		key = c.idemKey[0]
	}
	idempotent := false
	switch c.method {
	case "", "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		idempotent = true
	case "POST", "PATCH":
		idempotent = key != ""
	}
	var pre []Reason // why no retry is possible before anything is sent
	if c.maxAttempts <= 1 {
		pre = append(pre, ReasonAttemptsUsed)
	}
	if !idempotent {
		pre = append(pre, ReasonNotReplayable)
	}
	if c.body == 3 && (c.bodyBuffer <= 0 || int64(len(c.payload)) > c.bodyBuffer) {
		pre = append(pre, ReasonNotReplayable)
	}
	tokens := c.budget // < 0 or 6: more than enough
	for {
		calls++
		st := steps(calls - 1)
		if c.canceled {
			// The caller's context has ended: nothing is retried.
			if st.isResponse() && !st.retryable() {
				return calls, nil
			}
			r := append([]Reason{ReasonContextDone}, pre...)
			if st.kind == fzKindCert {
				r = append(r, ReasonNotRetryable)
			}
			if calls >= c.maxAttempts {
				r = append(r, ReasonAttemptsUsed)
			}
			return calls, r
		}
		if !st.retryable() {
			if st.isResponse() {
				return calls, nil
			}
			return calls, []Reason{ReasonNotRetryable}
		}
		r := slices.Clone(pre)
		if calls >= c.maxAttempts {
			r = append(r, ReasonAttemptsUsed)
		}
		if len(r) > 0 {
			return calls, r
		}
		// A retry follows unless its fresh body or its budget token fails.
		if c.body == 2 && c.getBodyFail == calls {
			r = append(r, ReasonNotReplayable)
		}
		if tokens == 0 {
			r = append(r, ReasonBudgetExhausted)
		}
		if len(r) > 0 {
			return calls, r
		}
		if tokens > 0 {
			tokens--
		}
	}
}

// FuzzRoundTrip drives RoundTrip with a fuzzed request, transport and a
// script of what next returns (including a response and an error together,
// and nil, nil), every delay zero, and checks the RoundTripper contract:
// exactly one of response and error; the response is the last one next
// produced, unread and open; every other response body closed once; the
// caller's request untouched and its body closed; next called as often as
// the documented rules allow (once for a request that may not be retried);
// the error wrapping the last attempt's cause; hooks and stats consistent.
func FuzzRoundTrip(f *testing.F) {
	// opts bits: 0–3 method, 4–5 Idempotency-Key, 6–7 body, 8–10 attempts,
	// 11–12 body buffer, 13–15 budget, 16 breaker, 17 transport hooks,
	// 18 request hooks, 19 attempt timeout, 20–22 failing GetBody call,
	// 24–29 payload length, 30 canceled context.
	// A GET with a replayable 12-byte body, 4 attempts, transport hooks:
	// 503, then 200.
	f.Add(uint32(2<<6|3<<8|1<<17|12<<24), []byte{0, 12, 0, 0}, "")
	// A POST with an Idempotency-Key and a replayable body, request hooks:
	// 429 with Retry-After 7, a response and an error together, nil and nil,
	// then 200.
	f.Add(uint32(6|1<<4|2<<6|3<<8|1<<18|5<<24), []byte{8, 8, 5, 9, 6, 0, 0, 0}, "7|Sun, 06 Nov 1994 08:49:37 GMT")
	f.Fuzz(func(t *testing.T, opts uint32, script []byte, ra string) {
		c := fzDecode(opts)
		next := &fzNext{steps: fzScript(script, ra)}
		wantCalls, wantReasons := fzModel(c, next.step)

		// The request.
		ctx := context.Background()
		var rlog fzHookLog
		if c.rHooks {
			ctx = ContextWithOptions(ctx, WithHooks(rlog.hooks()))
		}
		if c.canceled {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			cancel()
		}
		req, err := http.NewRequestWithContext(ctx, "GET", "http://fuzz.test/p?q=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Method = c.method
		req.Header.Set("X-Trace", "fz")
		if c.idemKey != nil {
			if c.idemRawKey {
				req.Header["idempotency-key"] = c.idemKey
			} else {
				req.Header["Idempotency-Key"] = c.idemKey
			}
		}
		var callerBody *fzReqBody
		var made []*fzReqBody // bodies GetBody made
		getBodyCalls := 0
		switch c.body {
		case 1:
			req.Body = http.NoBody
		case 2, 3:
			callerBody = &fzReqBody{r: strings.NewReader(c.payload)}
			req.Body, req.ContentLength = callerBody, int64(len(c.payload))
			if c.body == 2 {
				req.GetBody = func() (io.ReadCloser, error) {
					getBodyCalls++
					if getBodyCalls == c.getBodyFail {
						return nil, errFzGetBody
					}
					b := &fzReqBody{r: strings.NewReader(c.payload)}
					made = append(made, b)
					return b, nil
				}
			}
		}
		before := struct {
			method, url string
			header      http.Header
			body        io.ReadCloser
			getBody     bool
			length      int64
		}{req.Method, req.URL.String(), req.Header.Clone(), req.Body, req.GetBody != nil, req.ContentLength}

		// The transport: every delay zero, so that nothing sleeps. The
		// adaptive send rate is off, and so is the wait for a key that
		// would refuse: both wait in real time (their own tests run in
		// virtual time), and the model here is of the decision, not of the
		// pace or the wait.
		o := []Option{WithPolicy(immediate{}), WithMaxRetryAfter(0), WithRetryAfterSpread(0), WithAdaptiveRate(),
			WithMaxAttempts(c.maxAttempts), WithBodyBuffer(c.bodyBuffer), WithBudget(nil), WithBreaker(nil), WithMaxWait(0)}
		switch {
		case c.budget == 6:
			o = append(o, WithBudget(NewBudget(BudgetConfig{})))
		case c.budget == 0:
			o = append(o, WithBudget(NewBudget(BudgetConfig{Ratio: -1, MinPerSecond: -1})))
		case c.budget > 0:
			o = append(o, WithBudget(NewBudget(BudgetConfig{Ratio: float64(c.budget), MinPerSecond: -1})))
		}
		if c.breaker {
			o = append(o, WithBreaker(NewBreaker(BreakerConfig{})))
		}
		var tlog fzHookLog
		if c.tHooks {
			o = append(o, WithHooks(tlog.hooks()))
		}
		if c.timeout {
			o = append(o, WithAttemptTimeout(time.Hour))
		}
		tr := New(next, o...)

		resp, err := tr.RoundTrip(req)
		// The body of what is returned stays unread and open until here.
		var retBody *fzRespBody
		var retRead int64
		var retClosed int32
		if resp != nil {
			for _, h := range next.handed {
				if h.resp == resp {
					retBody = h.body
					retRead, retClosed = h.body.read.Load(), h.body.closed.Load()
				}
			}
			defer resp.Body.Close()
		}

		calls := len(next.sent)
		desc := func() string {
			status := "no response"
			if resp != nil {
				status = resp.Status
			}
			return fmt.Sprintf("config %+v, script %+v, Retry-After values %q: RoundTrip = %s, %v after %d calls", c, next.steps, ra, status, err, calls)
		}

		// Exactly one of response and error.
		if (resp == nil) == (err == nil) {
			t.Fatalf("%s: want exactly one of a response and an error", desc())
		}

		// How many attempts: never more than allowed, once if not retryable.
		if calls < 1 || calls > c.maxAttempts {
			t.Fatalf("%s: want 1 to %d calls", desc(), c.maxAttempts)
		}
		if calls != wantCalls {
			t.Fatalf("%s: want %d calls (stop reasons %v)", desc(), wantCalls, wantReasons)
		}

		// The answer is the last attempt's.
		last := next.step(calls - 1)
		lastRes := next.results[calls-1]
		var gotReason Reason
		switch {
		case last.isResponse():
			if resp == nil || resp != lastRes.resp {
				t.Fatalf("%s: want the last response next produced (%p)", desc(), lastRes.resp)
			}
			if retBody == nil {
				t.Fatalf("%s: the response returned was not handed out by next", desc())
			}
			if retRead != 0 || retClosed != 0 {
				t.Fatalf("%s: the response returned was read (%d bytes) or closed (%d times) by the transport", desc(), retRead, retClosed)
			}
		default:
			if err == nil {
				t.Fatalf("%s: want an error, the last attempt failed", desc())
			}
			cause := lastRes.err
			if cause == nil {
				cause = attempt.ErrNilResponse
			}
			if !errors.Is(err, cause) {
				t.Fatalf("%s: error does not wrap the last attempt's cause %q", desc(), cause)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%s: error is %T, want *Error", desc(), err)
			}
			if e.Attempts != calls {
				t.Fatalf("%s: Error.Attempts = %d, want %d", desc(), e.Attempts, calls)
			}
			if !slices.Contains(wantReasons, e.Reason) {
				t.Fatalf("%s: Error.Reason = %v, want one of %v", desc(), e.Reason, wantReasons)
			}
			gotReason = e.Reason
		}

		// Every other response body closed exactly once; those drained are
		// drained whole up to 64 KiB.
		for i, h := range next.handed {
			if h.resp == resp {
				continue
			}
			read, closed := h.body.read.Load(), h.body.closed.Load()
			if closed != 1 {
				t.Fatalf("%s: response %d (%v) closed %d times, want 1", desc(), i, h.step, closed)
			}
			if h.step.kind != fzKindBoth && read != int64(min(h.body.size, 64<<10)) {
				t.Fatalf("%s: response %d (%v) drained %d of %d bytes, want min(size, 64 KiB)", desc(), i, h.step, read, h.body.size)
			}
			if read > 64<<10 {
				t.Fatalf("%s: response %d read %d bytes, more than 64 KiB", desc(), i, read)
			}
		}

		// The caller's request: untouched, its body closed once; every body
		// GetBody made closed once.
		if req.Method != before.method || req.URL.String() != before.url || !maps.EqualFunc(req.Header, before.header, slices.Equal) ||
			req.Body != before.body || (req.GetBody != nil) != before.getBody || req.ContentLength != before.length {
			t.Fatalf("%s: the caller's request was modified", desc())
		}
		if callerBody != nil && callerBody.closed.Load() != 1 {
			t.Fatalf("%s: the caller's body was closed %d times, want 1", desc(), callerBody.closed.Load())
		}
		for i, b := range made {
			if n := b.closed.Load(); n != 1 {
				t.Fatalf("%s: body %d made by GetBody closed %d times, want 1", desc(), i, n)
			}
		}
		if c.body == 2 && c.maxAttempts > 1 && (getBodyCalls < calls-1 || getBodyCalls > calls) {
			t.Fatalf("%s: GetBody called %d times for %d attempts", desc(), getBodyCalls, calls)
		}

		// What each attempt carried: the caller's method, key and whole
		// body, a fresh request and body for every retry.
		for i, s := range next.sent {
			if s.method != c.method || !slices.Equal(s.idemKey, req.Header["Idempotency-Key"]) {
				t.Fatalf("%s: attempt %d sent method %q key %q", desc(), i+1, s.method, s.idemKey)
			}
			switch c.body {
			case 0, 1:
				if s.body != nil && s.body != http.NoBody {
					t.Fatalf("%s: attempt %d sent a body, the caller had none", desc(), i+1)
				}
			default:
				if string(s.content) != c.payload || s.content == nil {
					t.Fatalf("%s: attempt %d sent body %q, want %q", desc(), i+1, s.content, c.payload)
				}
			}
			if i > 0 && (s.req == req || c.body >= 2 && s.body == before.body) {
				t.Fatalf("%s: retry %d reused the caller's request or body", desc(), i)
			}
		}

		// Hooks: every attempt started and done, every retry scheduled
		// without delay, one give-up for a failure.
		gaveUp := err != nil || len(wantReasons) > 0
		for _, l := range []struct {
			on  bool
			log *fzHookLog
		}{{c.tHooks, &tlog}, {c.rHooks, &rlog}} {
			if !l.on {
				continue
			}
			if len(l.log.starts) != calls || len(l.log.dones) != calls || len(l.log.retries) != calls-1 {
				t.Fatalf("%s: hooks saw %d starts, %d dones, %d retries", desc(), len(l.log.starts), len(l.log.dones), len(l.log.retries))
			}
			for i, d := range l.log.dones {
				res := next.results[i]
				wantStatus, wantErr := 0, res.err
				switch {
				case res.err == nil && res.resp == nil:
					wantErr = attempt.ErrNilResponse
				case res.err == nil:
					wantStatus = res.resp.StatusCode
				}
				if d.Attempt != i+1 || d.Status != wantStatus || !errors.Is(d.Err, wantErr) || (wantErr == nil) != (d.Err == nil) {
					t.Fatalf("%s: AttemptDone %d = %+v, want status %d error %v", desc(), i+1, d, wantStatus, wantErr)
				}
			}
			for i, r := range l.log.retries {
				if r.Attempt != i+1 || r.Delay != 0 {
					t.Fatalf("%s: RetryScheduled %d = %+v, want no delay", desc(), i+1, r)
				}
				st := next.step(i)
				if v := strings.TrimSpace(http.Header{"Retry-After": st.ra}.Get("Retry-After")); st.isResponse() && fzAllDigits(v) {
					if !r.RetryAfter || r.Clamped != (strings.Trim(v, "0") != "") {
						t.Fatalf("%s: RetryScheduled %d = %+v after Retry-After %q", desc(), i+1, r, st.ra)
					}
				}
			}
			switch {
			case !gaveUp && len(l.log.giveUps) != 0:
				t.Fatalf("%s: GiveUp called for an answer that is not a failure: %+v", desc(), l.log.giveUps)
			case gaveUp && len(l.log.giveUps) != 1:
				t.Fatalf("%s: GiveUp called %d times, want once", desc(), len(l.log.giveUps))
			case gaveUp:
				g := l.log.giveUps[0]
				wantStatus := 0
				if resp != nil {
					wantStatus = resp.StatusCode
				}
				if g.Attempt != calls || g.Status != wantStatus || g.Err != err ||
					!slices.Contains(wantReasons, g.Reason) || (err != nil && g.Reason != gotReason) {
					t.Fatalf("%s: GiveUp(%+v), want %d attempts, status %d, error %v, reason in %v", desc(), g, calls, wantStatus, err, wantReasons)
				}
			}
		}

		// Stats.
		s := tr.Stats()
		var giveUps uint64
		for _, n := range s.GiveUps {
			giveUps += n
		}
		// Retry-After is counted at least on every response retried, at most
		// on every retryable response (transport.go does not count it on a
		// response that is returned: a known bug, skipped in stats_test.go).
		var raMin, raMax uint64
		for i := range calls {
			st := next.step(i)
			if st.isResponse() && st.retryable() && http.Header(map[string][]string{"Retry-After": st.ra}).Get("Retry-After") != "" {
				raMax++
				if i < calls-1 {
					raMin++
				}
			}
		}
		reasonOK := true
		for r := range s.GiveUps {
			reasonOK = reasonOK && slices.Contains(wantReasons, r) && (err == nil || r == gotReason)
		}
		if s.Requests != 1 || s.Attempts != uint64(calls) || s.Retries != uint64(calls-1) ||
			(gaveUp && giveUps != 1) || (!gaveUp && giveUps != 0) || !reasonOK ||
			s.RetryAfterSeen < raMin || s.RetryAfterSeen > raMax || s.RetryAfterClamped > s.RetryAfterSeen {
			t.Fatalf("%s: Stats = %+v", desc(), s)
		}
	})
}
