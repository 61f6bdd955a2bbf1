package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

var jsonOut = flag.String("json", "", "write the measured rows to this JSON file")

func TestMain(m *testing.M) {
	flag.Parse()
	goleak.VerifyTestMain(wrapMain{m})
}

// wrapMain writes the JSON file after the tests ran and before goleak looks.
type wrapMain struct{ m *testing.M }

func (w wrapMain) Run() int {
	code := w.m.Run()
	if *jsonOut != "" && code == 0 {
		if err := writeJSON(*jsonOut); err != nil {
			fmt.Fprintln(os.Stderr, "sdk: writing", *jsonOut+":", err)
			return 1
		}
	}
	return code
}

// fast replaces the default policy (FullJitter 200 ms base, 30 s cap) in
// rows where the delays do not matter to what is measured, so that the
// module runs in seconds and the breaker's 2 s span is never reached.
// rideOut is how many attempts the transport adds to a request whose
// attempts ran out while its key's failure was young: the first call of a
// row to a host answering 503 forever rides it out with 2 more; the calls
// after it (an SDK's own retries among them) do not, as that ride-out
// failed.
const rideOut = 2

var fast = retryhttp.WithPolicy(retryhttp.FullJitter{Base: time.Millisecond, Cap: 5 * time.Millisecond})

// row is one scenario: a recipe for both retry layers, the server's script,
// the SDK call and what the recipe promises. New settings of retryhttp are
// new rows: transport options go in opts, per-request settings in ctx.
type row struct {
	name   string
	opts   []retryhttp.Option                    // the transport's options; nil: every default
	ctx    func(context.Context) context.Context // per-request settings; nil: none
	tries  int                                   // the SDK's attempts per call: 0 its default, 1 its retries off
	real   bool                                  // keep the SDK's own backoff sleeps (else shortened where it allows)
	script Script
	call   func(ctx context.Context, e env) error

	promised int // most attempts per call the recipe promises; 0: none, just record
	want     int // exact attempts expected; 0: not checked
	// status is the HTTP status of the typed SDK error the call must end
	// with; 0: the call must succeed.
	status int
	// untyped: the SDK returns no typed error for this response (a body it
	// cannot parse); any error is accepted and recorded.
	untyped bool
	// mayTrip accepts, instead of the typed error, the circuit opening
	// under the row (the defaults rows outlast the breaker's 2 s span).
	mayTrip bool
	// circuitErr: the call must fail with an error wrapping
	// retryhttp.ErrCircuitOpen (the transport refused it, no response).
	circuitErr bool
	// typed replaces the SDK's typed check for this row (a local 503 has
	// no modeled error code); nil: the SDK's.
	typed func(err error, status int) error
	// unsent: the call must not reach the server at all (want 0).
	unsent bool
	// prep runs on the row's transport and server before the measured
	// call (to open a circuit, say); what it sends is not counted.
	prep    func(t *testing.T, ctx context.Context, e env)
	check   func(t *testing.T, reqs []Request) // more assertions; nil: none
	inspect func(t *testing.T, o observed)     // assertions on the SDK's tries; nil: none
}

// observed is what one measured call did: its error, the requests that
// reached the server and the SDK's calls to the transport (its tries).
type observed struct {
	err   error
	reqs  []Request
	tries []try
}

// try is one call of the SDK to the transport, as the wrapping
// RoundTripper saw it: when it started and returned, and what it returned.
type try struct {
	start, end time.Time
	status     int         // 0 on error
	header     http.Header // the response's; nil on error
	err        error
}

// local reports that the try got the transport's own 503 for an open
// circuit.
// localHeader marks the transport's own 503 (retryhttp.WithCircuitOpenResponse).
const localHeader = "X-Retryhttp-Local"

func (t try) local() bool { return t.header.Get(localHeader) == "circuit-open" }

// The rows of each SDK are lettered by what they measure:
//
//	a  both layers' defaults
//	b  the SDK's retries off, retryhttp's defaults
//	c  retryhttp 1 attempt (transport-wide), the SDK's defaults
//	d  POSTs, with and without an Idempotency-Key
//	e  503,503,200; S3 PutObject with and without WithBodyBuffer
//	f  DynamoDB reads marked idempotent (the read recipe)
//	i  a request marked idempotent, or not, through its context
//	j  the circuit key on a path-style endpoint (S3)
//	k  an open circuit, with and without the local 503
//	p  the per-request form: ContextWithOptions(WithMaxAttempts(1)) under a transport of 4
//	r  the recommended recipe of the SDK

// env is what an SDK call needs: the server, an *http.Client whose
// Transport goes through retryhttp, and the row's SDK settings.
type env struct {
	srv   *Server
	hc    *http.Client
	tries int
	real  bool
}

// result is one measured row, as written to the JSON file.
type result struct {
	SDK             string   `json:"sdk"`
	Scenario        string   `json:"scenario"`
	AttemptsPerCall int      `json:"attempts_per_call"`
	Promised        int      `json:"promised"`
	ErrorType       string   `json:"error_type"`
	SDKTries        int      `json:"sdk_tries"`   // RoundTrip calls the SDK made on the transport
	Connections     int      `json:"connections"` // connections the server saw opened
	GiveUps         []string `json:"give_ups"`    // retryhttp's reasons, one per SDK try that ended on a failure
	Seconds         float64  `json:"seconds"`
	// TryLog describes each SDK try: when it started after the call began,
	// the pause since the previous try returned, and what it got.
	TryLog []string `json:"try_log,omitempty"`
}

var (
	resultsMu sync.Mutex
	results   []result
)

// sdkCase runs the rows of one SDK; typed checks that err is the SDK's own
// typed error for a response with the given status.
type sdkCase struct {
	name  string
	typed func(err error, status int) error
	rows  []row
}

// runSDK runs every row of c in parallel and logs the table.
func runSDK(t *testing.T, c sdkCase) {
	t.Parallel()
	var mu sync.Mutex
	var got []result
	t.Run("rows", func(t *testing.T) {
		for _, r := range c.rows {
			t.Run(r.name, func(t *testing.T) {
				t.Parallel()
				res := runRow(t, c, r)
				mu.Lock()
				got = append(got, res)
				mu.Unlock()
			})
		}
	})
	slices.SortFunc(got, func(a, b result) int { return strings.Compare(a.Scenario, b.Scenario) })
	t.Log(table(got))
	resultsMu.Lock()
	results = append(results, got...)
	resultsMu.Unlock()
}

// runRow makes one SDK call through a fresh transport and server and
// measures it.
func runRow(t *testing.T, c sdkCase, r row) result {
	srv := NewServer(t, r.script)
	tries := &countingRT{next: retryhttp.New(nil, r.opts...)}
	hc := &http.Client{Transport: tries, Timeout: 30 * time.Second}
	e := env{srv: srv, hc: hc, tries: r.tries, real: r.real}

	var mu sync.Mutex
	giveUps := []string{}
	hooks := &retryhttp.Hooks{GiveUp: func(i retryhttp.Event) {
		mu.Lock()
		defer mu.Unlock()
		giveUps = append(giveUps, i.Reason.String())
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// What prep sends is neither counted nor given the row's hooks and
	// per-request settings.
	if r.prep != nil {
		r.prep(t, ctx, e)
	}
	sentBefore, triesBefore := len(srv.Requests()), len(tries.log())
	ctx = retryhttp.ContextWithOptions(ctx, retryhttp.WithHooks(hooks))
	if r.ctx != nil {
		ctx = r.ctx(ctx)
	}

	start := time.Now()
	err := r.call(ctx, e)
	elapsed := time.Since(start)
	reqs := srv.Requests()[sentBefore:]
	log := tries.log()[triesBefore:]
	tryLog := describeTries(start, log)
	if len(tryLog) > 0 && (r.prep != nil || r.inspect != nil) {
		t.Logf("SDK tries:\n\t%s", strings.Join(tryLog, "\n\t"))
	}

	// The caller gets the SDK's typed error, or success.
	switch {
	case r.untyped:
		require.Error(t, err)
	case r.circuitErr:
		require.ErrorIs(t, err, retryhttp.ErrCircuitOpen, "error chain: %s", errorChain(err))
	case r.status == 0:
		require.NoError(t, err)
	case r.mayTrip && errors.Is(err, retryhttp.ErrCircuitOpen):
		t.Logf("the circuit opened: %v", err)
	case r.typed != nil:
		require.NoError(t, r.typed(err, r.status), "error chain: %s", errorChain(err))
	default:
		require.NoError(t, c.typed(err, r.status), "error chain: %s", errorChain(err))
	}

	// What the recipe promises.
	if r.promised > 0 {
		assert.LessOrEqual(t, len(reqs), r.promised, "attempts per call beyond the recipe's promise")
	}
	if r.want > 0 {
		assert.Equal(t, r.want, len(reqs), "attempts per call")
	}
	if r.unsent {
		assert.Empty(t, reqs, "the call reached the server")
	}
	if r.check != nil {
		r.check(t, reqs)
	}
	if r.inspect != nil {
		r.inspect(t, observed{err: err, reqs: reqs, tries: log})
	}

	// No connection leaked: once the client drops its idle connections,
	// every connection closes; one held busy by an unclosed body would not.
	hc.CloseIdleConnections()
	assert.Zero(t, srv.WaitAllClosed(2*time.Second), "connections left open after CloseIdleConnections")

	mu.Lock()
	defer mu.Unlock()
	res := result{
		SDK: c.name, Scenario: r.name, AttemptsPerCall: len(reqs), Promised: r.promised,
		ErrorType: errorChain(err), SDKTries: len(log), Connections: srv.Opened(),
		GiveUps: giveUps, Seconds: elapsed.Round(time.Millisecond).Seconds(),
	}
	if r.prep != nil || r.inspect != nil {
		res.TryLog = tryLog
	}
	return res
}

// countingRT records the SDK's calls to the transport: its own tries.
type countingRT struct {
	next     *retryhttp.Transport
	mu       sync.Mutex
	recorded []try
}

func (c *countingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	tr := try{start: time.Now()}
	resp, err := c.next.RoundTrip(req)
	tr.end, tr.err = time.Now(), err
	if resp != nil {
		tr.status, tr.header = resp.StatusCode, resp.Header.Clone()
	}
	c.mu.Lock()
	c.recorded = append(c.recorded, tr)
	c.mu.Unlock()
	return resp, err
}

func (c *countingRT) log() []try {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.recorded)
}

// describeTries formats the SDK's tries of one call, started at start.
func describeTries(start time.Time, tries []try) []string {
	var out []string
	for i, tr := range tries {
		pause := "-"
		if i > 0 {
			pause = fmt.Sprintf("%.3fs", tr.start.Sub(tries[i-1].end).Seconds())
		}
		got := fmt.Sprint(tr.status)
		switch {
		case tr.err != nil:
			got = "error " + errorChain(tr.err)
		case tr.local():
			got += fmt.Sprintf(" local (Retry-After %s s, Retry-After-Ms %s, X-Amz-Retry-After %s)",
				tr.header.Get("Retry-After"), tr.header.Get("Retry-After-Ms"), tr.header.Get("X-Amz-Retry-After"))
		}
		out = append(out, fmt.Sprintf("try %d at %.3fs, pause %s: %s", i+1, tr.start.Sub(start).Seconds(), pause, got))
	}
	return out
}

func (c *countingRT) CloseIdleConnections() { c.next.CloseIdleConnections() }

// errorChain names the types along err's chain, outermost first; a node
// that wraps several errors lists them in braces.
func errorChain(err error) string {
	if err == nil {
		return "none"
	}
	var parts []string
	for err != nil {
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			var sub []string
			for _, e := range u.Unwrap() {
				sub = append(sub, errorChain(e))
			}
			parts = append(parts, fmt.Sprintf("%T{%s}", err, strings.Join(sub, ", ")))
			err = nil
		default:
			parts = append(parts, fmt.Sprintf("%T", err))
			err = errors.Unwrap(err)
		}
	}
	return strings.Join(parts, " > ")
}

// table formats rows for t.Log.
func table(rs []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-8s | %-58s | %8s | %8s | %5s | %5s | %s\n", "sdk", "scenario", "attempts", "promised", "tries", "conns", "error / give-ups")
	for _, r := range rs {
		promised := "-"
		if r.Promised > 0 {
			promised = fmt.Sprint(r.Promised)
		}
		fmt.Fprintf(&b, "%-8s | %-58s | %8d | %8s | %5d | %5d | %s; give-ups: %s\n", r.SDK, r.Scenario,
			r.AttemptsPerCall, promised, r.SDKTries, r.Connections, r.ErrorType, strings.Join(r.GiveUps, ", "))
		for _, l := range r.TryLog {
			fmt.Fprintf(&b, "%-8s | %-58s |   %s\n", "", "", l)
		}
	}
	return b.String()
}

func writeJSON(path string) error {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	slices.SortFunc(results, func(a, b result) int {
		return strings.Compare(a.SDK+"\x00"+a.Scenario, b.SDK+"\x00"+b.Scenario)
	})
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // keep the ">" of the error chains
	enc.SetIndent("", "  ")
	if err := enc.Encode(results); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// Checks shared by the SDKs' rows.

// sameHeader asserts that every recorded request carries one non-empty
// value of the field get reads.
func sameHeader(name string, get func(Request) string) func(*testing.T, []Request) {
	return func(t *testing.T, reqs []Request) {
		require.NotEmpty(t, reqs)
		for _, r := range reqs {
			assert.NotEmpty(t, get(r), "request %d: %s missing", r.N, name)
			assert.Equal(t, get(reqs[0]), get(r), "request %d: %s changed", r.N, name)
		}
	}
}

// noHeader asserts that no recorded request carries the field get reads.
func noHeader(name string, get func(Request) string) func(*testing.T, []Request) {
	return func(t *testing.T, reqs []Request) {
		for _, r := range reqs {
			assert.Empty(t, get(r), "request %d: %s sent", r.N, name)
		}
	}
}

// checks runs several checks.
func checks(cs ...func(*testing.T, []Request)) func(*testing.T, []Request) {
	return func(t *testing.T, reqs []Request) {
		for _, c := range cs {
			c(t, reqs)
		}
	}
}

// sameBody asserts that every recorded request carries the first one's
// body, byte for byte.
func sameBody(t *testing.T, reqs []Request) {
	require.NotEmpty(t, reqs)
	for _, r := range reqs {
		assert.True(t, bytes.Equal(reqs[0].Body, r.Body), "request %d: body differs from the first (%d vs %d bytes)", r.N, len(r.Body), len(reqs[0].Body))
	}
}

// opts lists transport options.
func opts(o ...retryhttp.Option) []retryhttp.Option { return o }
