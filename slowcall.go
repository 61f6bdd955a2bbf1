package retryhttp

import (
	"net/http"
	"time"

	"github.com/retryhttp/retryhttp/internal/perkey"
)

// defaultSlowAfter is BreakerConfig.SlowAfter's default: an attempt whose
// caller gives up counts against its host only after it has waited a
// second for the response headers. Callers commonly give an interactive
// request a few hundred milliseconds; a deadline that short says more
// about the caller than about the host, and must never open a healthy
// host's circuit, even before the transport has seen the host answer. A
// second is also Hystrix's default command timeout, which it counts as a
// failure of the dependency. A host whose answers take longer is guarded
// by its own answer time (see perkey's latency.go); and a hung host is
// still caught within the breaker's 2 s span, by callers whose deadlines
// are longer than a second.
const defaultSlowAfter = time.Second

// An attempt that ends because its caller's context ended says, on its
// own, nothing about the host: classify gives it no outcome. Yet a host
// that accepts connections and never answers leaves its callers nothing
// else to see, and with no attempt timeout (none by default) its circuit
// would never open: every caller would wait its whole deadline, with a
// connection held, however long the outage. So the transport times the
// attempts of requests whose context can end, and counts one as a failure
// of its key when it was sent, got no response headers before the
// caller's context ended, and ran longer than the key's slow-call
// threshold (perkey.Lane.Slow): BreakerConfig.SlowAfter, and twice the
// key's answer time, which the timed successes feed.
//
// The success path of a request whose context cannot end (the Background
// context) takes no timestamp: such a request never ends this way, and
// the clock would cost it two reads of the time. Nor does a transport
// without a breaker, which has no circuit to tell. A request with a
// deadline pays for two reads of the clock per attempt, and an atomic
// load of its key's answer time when it succeeds (a write only when the
// answer time changes), with no lock, allocation or goroutine.

// timed reports whether the attempts of the request are timed: it goes
// through a breaker with the rule on (settings.slowCalls, set by New, so
// that the success path reads the settings it has at hand rather than
// follow pointers to the breaker's configuration), and its context can end
// or its attempts have a timeout. The context is asked last: its Done is
// a call through an interface.
func (r *retrier) timed() bool { return r.s.slowCalls && r.mayEnd() }

// mayEnd reports whether the request's context can end, or its attempts
// have a timeout, for a request that has its key's lane.
func (r *retrier) mayEnd() bool {
	return r.lane != nil && (r.s.attemptTimeout > 0 || r.req.Context().Done() != nil)
}

// sendClocked sends the attempt of a timed request, timing it from the
// call to the response headers or the error.
func (r *retrier) sendClocked(areq *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := r.sendWithTimeout(areq)
	r.took, r.timing = time.Since(start), unanswered
	if err == nil {
		r.timing = answered
	}
	return resp, err
}

// timing is how the timed wait of an attempt ended.
type timing uint8

const (
	untimed    timing = iota // the attempt was not timed
	answered                 // response headers came
	unanswered               // an error came instead
)

// judgeTime applies what the latest attempt's time says to its verdict,
// once classify has given it: a timed success feeds its key's answer time;
// a timed attempt that got no answer before its caller's context ended,
// after longer than its key's slow-call threshold, becomes a failure of
// the key (still not retried: the caller has gone).
func (r *retrier) judgeTime(v *verdict) {
	if r.timing != untimed {
		r.judgeTimed(v) // the untimed success path stops at the check, inlined
	}
}

func (r *retrier) judgeTimed(v *verdict) {
	timing := r.timing
	r.timing = untimed
	switch {
	case timing == answered && v.host == perkey.Success:
		r.lane.Answered(r.took)
	case timing == unanswered && v.why == ReasonContextDone && r.lane.Slow(r.took):
		v.host = perkey.Failure
		r.t.stats.slowAttempts.Add(1)
	}
}
