package retryhttp

import (
	"net/http"
	"strings"
	"time"

	"github.com/retryhttp/retryhttp/internal/attempt"
	"github.com/retryhttp/retryhttp/internal/perkey"
)

// facts are what decide knows of a failed attempt, as plain values.
type facts struct {
	retryable    bool   // classify found the outcome worth retrying
	why          Reason // classify's reason when it is not
	ctxDone      bool   // the caller's context has ended
	attemptsLeft int    // attempts the request may still make
	rideOut      bool   // its attempts are used, but it may make another to ride out its key's young failure
	idempotent   bool   // the request may be sent more than once
	reached      bool   // the attempt reached the server, or may have
	replayable   bool   // the body can be sent again
	circuitOpen  bool   // the key's circuit is open now
	mayWait      bool   // the request may wait for its key to recover (WithMaxWait)
	waitsNot     bool   // WithMaxWait(0): the caller's own queue waits, not the transport
	asked        bool   // delay is the server's: a Retry-After asked for it
	delay        time.Duration
	now          time.Time
	deadline     time.Time // the context's; zero if it has none
}

// next is what follows a failed attempt.
type next uint8

const (
	stop       next = iota // no retry: return what there is
	retryAfter             // retry once the delay has passed
	retryWhen              // retry when the key lets the request go: it waits for the key to recover
	// queueBehind retries when the key lets the request go from its
	// queue: the budget refused the retry, or others already wait (only
	// rewind says so; decide does not).
	queueBehind
	// rideOut retries once the delay has passed, whatever the key's
	// circuit does meanwhile: one of the attempts past WithMaxAttempts
	// that ride out a young failure (see retrier.rideOut).
	rideOut
)

// step is what plan made of a failed attempt, for rewind and wait to
// carry out. It keeps to four fields, which the compiler keeps in
// registers.
type step struct {
	then  next
	why   Reason        // why the request stops; for queueBehind, the refusal the queue stands in for
	delay time.Duration // the wait before a retry
	due   time.Time     // when the retry is due: delay after the decision
}

// plan gathers what decide needs about the failed latest attempt, with
// the delay its retry would wait, and returns what decide said.
func (r *retrier) plan(v verdict) step {
	f := r.facts(v)
	if f.rideOut {
		// Never earlier than the server asked, if it did.
		f.delay = rideOutDelay(f.now, f.deadline)
		if w := r.fail.wait; w.OK {
			f.delay = max(f.delay, w.Duration)
		}
	} else if v.retry {
		f.delay = r.delay()
	}
	then, why := decide(f)
	if then == stop && why == ReasonAttemptsUsed && r.attempts > r.s.maxAttempts && r.lane != nil {
		// It rode the failure out, in vain.
		r.lane.RodeOut()
	}
	delay := f.delay
	return step{then: then, why: why, delay: delay, due: f.now.Add(delay)}
}

// decide answers whether a failed attempt is retried, and how: after the
// drawn delay, or when its key has recovered; or not, and why not. Its
// cases are checked in the order they apply, and each has its reason; what
// is not shown to be safe is not retried.
func decide(f facts) (next, Reason) {
	switch {
	case !f.retryable:
		// Nothing a retry could mend: a status outside the retried ones,
		// a certificate error, what WithRetryIf rejects, or the caller's
		// own context ending during the attempt.
		return stop, f.why
	case f.ctxDone:
		// The caller has gone: nobody would read the retry's answer.
		return stop, ReasonContextDone
	case f.attemptsLeft <= 0 && !f.rideOut:
		return stop, ReasonAttemptsUsed
	case !f.idempotent && f.reached:
		// Sending it again could apply it twice; only a request that
		// never reached the server may go again whatever its method.
		return stop, ReasonNotReplayable
	case !f.replayable:
		return stop, ReasonNotReplayable
	case f.rideOut && f.now.Add(f.delay).Before(f.deadline):
		// The attempts are used, and the key's failure is young: one
		// more attempt, spaced to fit the deadline, whatever the circuit
		// does meanwhile. (rideOut is only set under a deadline, real or
		// the envelope's; see retrier.rideOut.)
		return rideOut, reasonNone
	case f.rideOut:
		return stop, ReasonAttemptsUsed
	case f.circuitOpen && f.mayWait:
		// Open now, by this failure or by others while this attempt was
		// in flight: the retry waits for the key to let it go, with no
		// delay drawn and no token spent (the wait is deferred work, not
		// a retry into the outage).
		return retryWhen, reasonNone
	case f.circuitOpen:
		// Open, and the request may not wait (a dispatcher with its own
		// queue): no retry would be let through, so none is scheduled
		// and no token spent.
		return stop, ReasonCircuitOpen
	case !f.deadline.IsZero() && !f.now.Add(f.delay).Before(f.deadline):
		// Sleeping would outlive the caller's deadline: return now.
		return stop, ReasonContextDone
	case f.waitsNot && f.asked && f.delay > noWaitDelay:
		// The caller keeps its own queue: the answer goes back now, and
		// RetryAt says when the server asked to be tried again.
		return stop, ReasonHeld
	}
	// Every check passed, and the retry can be sent before the caller's
	// deadline.
	return retryAfter, reasonNone
}

// DefaultRetryIf is the default test of WithRetryIf: transport errors and
// the statuses 408, 429, 500, 502, 503 and 504, unless X-Should-Retry or
// Stripe-Should-Retry ("true" or "false") on a status of 400 or above says
// otherwise.
func DefaultRetryIf(resp *http.Response, err error) bool {
	if err != nil {
		return true
	}
	if resp.StatusCode >= 400 {
		if advice, ok := shouldRetry(resp.Header); ok {
			return advice
		}
	}
	switch resp.StatusCode {
	case http.StatusRequestTimeout, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// shouldRetry reads a server's advice on retrying a response: ok is false
// when it gives none.
func shouldRetry(h http.Header) (retry, ok bool) {
	for _, name := range [...]string{"X-Should-Retry", "Stripe-Should-Retry"} {
		switch h.Get(name) {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	return false, false
}

// DefaultIdempotentIf is the default test of WithIdempotentIf: the methods
// that RFC 9110 defines as idempotent (GET, HEAD, OPTIONS, TRACE, PUT,
// DELETE), and POST or PATCH carrying a non-empty Idempotency-Key header,
// which asks the server to apply the request at most once.
func DefaultIdempotentIf(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions,
		http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	case http.MethodPost, http.MethodPatch:
		return req.Header.Get("Idempotency-Key") != ""
	}
	return false
}

// reach says how far an attempt got.
type reach uint8

const (
	// reached: the request reached the server, or may have: a response, or
	// an error after the connection was made.
	reached reach = iota
	// notReached: the request provably never reached the server (the dial
	// was refused, the name did not resolve, the TLS handshake failed), so
	// sending it again cannot apply it twice, whatever its method.
	notReached
	// notThere: notReached, and the host was not there to reach (see
	// attempt.Absent), which says nothing of how much it can take.
	notThere
	// notSent: the request itself is at fault and was never sent as it
	// stands (a malformed URL or header, an unsupported scheme): the same
	// request fails the same way every time, and the host is not to blame.
	notSent
)

// verdict is what one attempt's outcome says: how far it got, whether it
// is worth retrying, and what it tells the host's circuit.
type verdict struct {
	reach reach
	// retry reports a retryable outcome. Whether a retry is then made is
	// the decision's business (idempotency, attempts, circuit, deadline,
	// budget).
	retry bool
	// why is the reason to stop when retry is false and the outcome is not
	// a success: ReasonNotRetryable or ReasonContextDone.
	why  Reason
	host perkey.Kind // what the key's circuit is told
	// Four fields, which the compiler keeps in registers (a struct of
	// more is kept in memory): what else an outcome says goes into these.
}

// success reports an outcome that ends the request without a failure: a
// response that is not retryable.
func (v verdict) success() bool { return !v.retry && v.why == reasonNone }

// classify judges the outcome of one attempt of req: the response, or the
// error, that the next RoundTripper returned. It reads nothing but its
// arguments (and the request's context), in the manner of net/http's
// shouldRetryRequest; the loop around it acts on what it says.
func classify(req *http.Request, resp *http.Response, err error, retryIf func(*http.Response, error) bool) verdict {
	if err != nil {
		switch {
		case req.Context().Err() != nil:
			// The caller's context ended: its own error is never retried,
			// and says nothing about the host.
			return verdict{why: ReasonContextDone}
		case callerMistake(req, err):
			// Nothing reached the host; the same request fails the same way.
			return verdict{reach: notSent, why: ReasonNotRetryable}
		case attempt.CertificateRejected(err):
			// The same certificate fails the same way; a host with a bad
			// certificate is misconfigured, not overloaded, so its circuit
			// is not told.
			return verdict{why: ReasonNotRetryable}
		case strings.Contains(err.Error(), "server response headers exceeded"):
			// More header bytes than the caller's http.Transport accepts
			// (MaxResponseHeaderBytes): the same response is refused the
			// same way, after reading as much again.
			return verdict{why: ReasonNotRetryable}
		}
	}
	v := verdict{retry: retryIf(resp, err)}
	if err != nil && attempt.NeverReached(err) {
		v.reach = notReached
		if attempt.Absent(err) {
			v.reach = notThere
		}
	}
	switch {
	case v.retry:
		v.host = perkey.Failure
	case err == nil:
		// The host answered: a success to its circuit, whatever the status.
		v.host = perkey.Success
	default:
		// A transport error that WithRetryIf rejects tells nothing of the
		// host.
		v.why = ReasonNotRetryable
	}
	return v
}

// callerMistake reports an error that the request itself caused before
// anything reached the host. net/http reports these as plain errors, so the
// request is checked here against net/http's own rules (the ones
// http.Transport applies before it dials); this runs only after an attempt
// failed, never on the success path.
func callerMistake(req *http.Request, err error) bool {
	u := req.URL
	if u == nil || u.Host == "" || req.Header == nil {
		return true
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		// A next RoundTripper may serve other schemes; only its own word
		// that it does not makes it the caller's mistake.
		return strings.Contains(err.Error(), "unsupported protocol scheme")
	}
	if req.Method != "" && !validToken(req.Method) {
		return true
	}
	if !validHeader(req.Header) || !validHeader(req.Trailer) || hasCTL(u.RequestURI()) {
		return true
	}
	// A body shorter or longer than its declared ContentLength: net/http
	// refuses to finish writing it, and it will be just as wrong next time.
	return req.ContentLength > 0 && strings.Contains(err.Error(), "with Body length")
}

// validHeader applies net/http's rules for outgoing header fields: names
// are tokens, values hold no control character other than a tab.
func validHeader(h http.Header) bool {
	for k, vv := range h {
		if !validToken(k) {
			return false
		}
		for _, v := range vv {
			for i := 0; i < len(v); i++ {
				if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
					return false
				}
			}
		}
	}
	return true
}

// validToken reports whether s is a token (RFC 9110 §5.6.2), as header
// names and methods must be.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// delay returns the wait before the next attempt: the server's, spread,
// when it asked (its spread is drawn when that wait is over: see
// retrier.wait); otherwise the policy's draw. A Policy must not return a
// negative delay; one that does waits nothing, rather than a negative time
// in Stats.
func (r *retrier) delay() time.Duration {
	if wait := r.fail.wait; wait.OK {
		// The server's wait; its spread is drawn when it is over, by the
		// crowd then (see retrier.wait). A throttled key gets none: the
		// hold the Retry-After put on it spaces its retries out, and the
		// send rate, just cut, paces them after it. Without a
		// Retry-After the policy's delay is drawn as for any failure:
		// the send rate adds to it and never replaces it, or a lone
		// caller, whose rate the pacer has yet to learn, would retry at
		// once.
		return wait.Duration
	}
	var prev time.Duration // a policy that uses it always has a lane: see RoundTrip
	if r.lane != nil {
		prev = r.lane.Prev()
	}
	return max(r.s.policy.Delay(r.attempts, prev), 0)
}

// crowdFree and crowdRate size the spread above an instant a crowd was
// told (a Retry-After, a hold's end): a crowd of up to crowdFree takes
// the instant as given, as many as one busy client sends at once anyway
// (a front answering a deploy's 503s to a service's 100 workers); past
// it, the spread is the excess over crowdRate requests a second, up to
// WithRetryAfterSpread: 1,100 or more over the whole default 1 s, as
// every crowd was.
const (
	crowdFree = 100
	crowdRate = 1000
)

// crowdSpread returns the spread above a Retry-After or a hold's end for
// this request: WithRetryAfterSpread, narrowed in proportion to how many
// requests of the key sleep toward it or wait for it now (the request
// itself included), so that the spread, whose purpose is to keep a crowd
// from returning at one instant, does not delay a caller that has no
// crowd to be kept from. A request with no lane knows of no crowd and
// takes the whole spread.
//
// The crowd is counted when the server's wait is over, not when the
// answer came: a crowd told the same instant gets its answers one after
// another, and the first of them would count only those before it, while
// at the instant itself every member still sleeps toward the key.
func (r *retrier) crowdSpread() time.Duration {
	s := r.s.retryAfterSpread
	if r.lane == nil || s <= 0 {
		return s
	}
	return min(s, time.Duration(max(r.lane.Crowd()+1-crowdFree, 0))*time.Second/crowdRate)
}

// facts gathers what decide needs to know about the failed latest attempt.
func (r *retrier) facts(v verdict) facts {
	f := facts{
		retryable:    v.retry,
		why:          v.why,
		ctxDone:      r.req.Context().Err() != nil,
		attemptsLeft: r.s.maxAttempts - r.attempts,
		idempotent:   r.idempotent,
		reached:      v.reach != notReached && v.reach != notThere,
		replayable:   r.body.Replayable(),
		circuitOpen:  r.lane != nil && r.lane.IsOpen(),
		mayWait:      r.maxWaitLeft() > 0,
		waitsNot:     r.s.maxWait <= 0,
		asked:        r.fail.wait.OK,
		now:          time.Now(),
	}
	f.deadline, _ = r.req.Context().Deadline()
	if f.retryable && f.attemptsLeft <= 0 && f.mayWait {
		f.rideOut, f.deadline = r.rideOut(f.now, f.deadline)
	}
	return f
}

// keyFailing reports whether the request's key is failing as a whole (see
// perkey.Lane.FailingSince): a host restarting, or down, answers nobody;
// a lossy link, or a failure of this request's own, leaves others
// answered.
func (r *retrier) keyFailing() bool {
	_, only := r.lane.FailingSince()
	return only
}

// mayBeFailing reports whether the request's key may be failing as a
// whole: it is (see keyFailing), or nothing keeps its record (no
// breaker), or the request has no lane to ask.
func (r *retrier) mayBeFailing() bool {
	return r.t.breaker == nil || r.lane == nil || r.keyFailing()
}

// noWaitDelay is the longest a request of WithMaxWait(0) sleeps on its
// own behalf for a wait a server asked (a Retry-After, a hold): the
// caller keeps its own queue and asks RetryAt when to send the request
// again, and a worker held for a server's wait of seconds serves nothing
// meanwhile. The policy's own delays are slept as drawn (at most 0.8 s
// each under the default policy).
const noWaitDelay = time.Second

// rideOutAttempts is how many attempts past WithMaxAttempts a request
// may make to ride out a young failure of its key: with the default 4,
// at most 6 in all, the most the usual guidance gives a single call (3 to
// 6 attempts). Two suffice to span the envelope: the first a quarter to a
// half of the way in, the second as far again into what is left.
const rideOutAttempts = 2

// rideOutEnvelope bounds the ride-out of a request without a deadline:
// its last attempt comes 2.5 to 10 s after its attempts were used, past a
// restart of a few seconds (a rolling deploy, a process manager's restart
// of a crashed server), without holding a caller with no deadline for
// longer than the default retry sequences of its peers (go-retryablehttp
// waits 1+2+4+8 = 15 s over its retries, .NET's standard handler about
// 14 s over 3).
const rideOutEnvelope = 10 * time.Second

// rideOut reports whether a request whose attempts are used may make one
// more to ride out its key's young failure, and the instant its ride-out
// must end by: its deadline, or without one the envelope's end. The key
// must be failing as a whole: its circuit open, or its failure period
// under way with no success since it began (so without a breaker, which
// keeps that record, there is no ride-out). A request whose retries were
// turned off (WithMaxAttempts(1)), or that may not wait (WithMaxWait(0),
// or a key failing for longer than it would wait: see maxWaitLeft),
// makes none.
//
// The attempts of a retry policy are drawn for a herd: spread, and short,
// so that thousands of callers do not retry together, and the breaker and
// the budget take over when failure outlasts them (the default 4 attempts
// are over in 0.7 s on average, 1.4 s at most). A lone caller has no
// breaker to wait behind (its few failures trip none) and no budget to run
// out of: without a ride-out it gives up inside a one-second blip that a
// caller with a 10 s deadline could have waited out.
func (r *retrier) rideOut(now, deadline time.Time) (bool, time.Time) {
	if r.s.maxAttempts <= 1 || r.attempts >= r.s.maxAttempts+rideOutAttempts || r.lane == nil {
		return false, deadline
	}
	if r.lane.RiddenOut() {
		// Another request rode this failure out in vain: it is not
		// young any more.
		return false, deadline
	}
	if !r.keyFailing() {
		// Nothing shows the key failing as a whole (no breaker keeps its
		// failures, or other requests to it succeed): the failure may be
		// this request's own, and waiting would not mend it.
		return false, deadline
	}
	envelope := rideOutEnvelope
	if !deadline.IsZero() {
		envelope = deadline.Sub(now)
	}
	return true, now.Add(min(r.maxWaitLeft(), envelope))
}

// rideOutDelay draws the delay before a ride-out attempt: a quarter to a
// half of what is left of the envelope. The first of two lands 25–50% of
// the way in, the second 44–75%: with a 10 s deadline and attempts used
// within 1.4 s, the first after 2.1 s and the second after 3.7 s, so an
// outage of 1 to 3 s is over before one of them, and each leaves the
// attempt half its envelope or more to be answered in. The draw spreads
// callers whose attempts ran out together.
func rideOutDelay(now, end time.Time) time.Duration {
	left := end.Sub(now)
	return uniform(left/4, left/4)
}

// rewind prepares the retry that decide allowed, in this order: the next
// attempt's request with a fresh body (queued in r.body); then, for a
// retry after a delay, the budget's token, last so that a retry not made
// costs none (without one, or when others already wait for the key, the
// retry queues for the key if the request may wait, and stops otherwise);
// then the delay becomes the key's previous delay, and the stats and the
// hooks hear of the retry. It returns what follows, and why: why not when
// nothing does, what the queue stands in for when it queues (the budget's
// refusal, or none when it joined others).
func (r *retrier) rewind(p step) (next, Reason) {
	switch r.body.Next() {
	case attempt.ContextEnded:
		// Waiting for the previous attempt to let go of a shared body, the
		// caller's context ended.
		return stop, ReasonContextDone
	case attempt.NoFreshBody:
		// GetBody failed: the body cannot be sent again.
		return stop, ReasonNotReplayable
	}
	if p.then == retryWhen {
		return p.then, reasonNone
	}
	if r.lane != nil && r.lane.Waiting() && r.maxWaitLeft() > 0 && r.mayBeFailing() {
		// Others already wait for the key to recover, and it is failing
		// as a whole: this retry joins them rather than spend a token on
		// a host that is failing them. A key that answers others (a
		// lossy link that resets some connections) is not: the retry
		// goes as any other, or the queue would hold it for nothing.
		return queueBehind, reasonNone
	}
	// A throttled retry takes no token while the adaptive rate covers
	// 429: the server is up and asks for less, and the key's send rate,
	// cut by every 429, already bounds the load retries add to it. A
	// retry after a 5xx is a bet that the host is still there; the budget
	// limits how much of the traffic bets.
	if b := r.t.budget; b != nil && !r.fail.throttled && !b.withdraw(r.keyOf()) {
		r.t.stats.budgetDenied.Add(1)
		if r.maxWaitLeft() > 0 && r.mayBeFailing() {
			// The key fails as a whole (or nothing is known of it): the
			// retry waits for it to recover, as a test or a success of
			// another request will show.
			return queueBehind, ReasonBudgetExhausted
		}
		// The key answers others: its failures are this request's bad
		// luck (a lossy link), not an outage that a wait would see end.
		// The budget bounds the retries to its share of the traffic, and
		// the request comes back at once with its failure: in the queue
		// it would wait for nothing, and its caller, held there, would
		// send nothing that earns the budget its deposits.
		return stop, ReasonBudgetExhausted
	}
	if r.lane != nil {
		r.lane.SetPrev(p.delay)
	}
	r.t.stats.recordDelay(r.attempts, p.delay)
	fire(r.hooks, (*Hooks).retryScheduled, Event{Request: r.req, Attempt: r.attempts, Delay: p.delay, RetryAfter: r.fail.wait.OK, Clamped: r.fail.wait.Clamped})
	return p.then, reasonNone
}
