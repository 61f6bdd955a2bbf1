package retryhttp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/retryhttp/retryhttp/internal/perkey"
)

// admit asks the key's lane to let the next attempt through. Without a
// lane, nothing needs asking until some key has been held or paced: then
// the request looks its key's lane up (perhaps after waiting its
// first-attempt jitter while the first hold came).
func (r *retrier) admit() error {
	if r.adm.ok {
		return nil
	}
	if r.lane == nil {
		if !r.t.lanes.Flagged() {
			return nil
		}
		r.lane = r.t.lanes.Lane(r.keyOf())
	}
	tk, trs, err := r.lane.Admit(r.req.Context(), r.limits())
	r.adm.ticket, r.adm.ok = tk, err == nil
	if err != nil || trs.Any() {
		return r.admitSlow(trs, err)
	}
	if tk.Paced() {
		r.t.stats.paced.Add(1)
	}
	return nil
}

// limits returns what the request's admission is bound by.
func (r *retrier) limits() perkey.Limits {
	lim := r.s.inFlight
	lim.RefuseInFlight = r.s.maxWait == 0 // waits for nothing: not for a place either
	lim.Queue = r.s.maxWait > r.waits.total
	if r.lane.RoutesHeld() {
		// Only then does the admission look at the route: the success
		// path of a key with no route held does not build it.
		lim.Route = r.route()
	}
	return lim
}

// route returns the route of the request that a server's Retry-After
// holds (see perkey.Lane.holdFor): its method and path, under the default
// key; under WithKey, the zero Route: the key function's key is the scope
// a hold covers.
func (r *retrier) route() perkey.Route {
	if r.t.keyFunc != nil {
		return perkey.Route{}
	}
	return perkey.Route{Method: r.req.Method, Path: r.req.URL.Path}
}

// admitSlow finishes an admission that made changes or was refused: it
// reports the changes; while the key is held it waits for the hold's end
// (or its test's time, or the test that ends it: perkey.Lane.HeldWait),
// plus a spread drawn like a Retry-After's so that the held requests do
// not return together, when the request's deadline allows and its waits
// for holds stay within its Retry-After clamp; while the circuit is open
// or the key isolated, it waits for the key to recover, when the request
// may wait (WithMaxWait); then it asks again.
func (r *retrier) admitSlow(trs perkey.Transitions, err error) error {
	var held time.Duration
	for {
		r.report(trs)
		switch e := err.(type) {
		case *perkey.HeldError:
			r.t.stats.held.Add(1)
			dl, _ := r.req.Context().Deadline()
			patience := r.s.maxRetryAfter + r.s.retryAfterSpread
			if patience < 0 { // both are at least 0: the sum overflowed
				patience = math.MaxInt64
			}
			if r.s.maxWait <= 0 {
				// WithMaxWait(0): RetryAt tells the caller's queue when.
				patience = min(patience, noWaitDelay)
			}
			waited, spread, ok, serr := r.lane.HeldWait(r.req.Context(), e, held, patience, dl)
			if !ok {
				return &heldError{until: e.Until}
			}
			held += waited
			r.lane = r.t.lanes.Lane(r.keyOf()) // as after any sleep
			if serr == nil && spread {
				// Spread by the crowd at the hold's end (see crowdSpread).
				var d time.Duration
				d, serr = r.spreadCrowd(min(r.s.retryAfterSpread, patience-held))
				held += d
			}
			if serr != nil && serr != ErrCircuitOpen {
				return serr
			}
			var tk perkey.Ticket
			tk, trs, err = r.lane.Admit(r.req.Context(), r.limits())
			r.adm.ticket, r.adm.ok = tk, err == nil
		default:
			if (err != perkey.ErrOpen && err != perkey.ErrIsolated && err != perkey.ErrTurn) || r.maxWaitLeft() <= 0 {
				return r.refused(err)
			}
			why := ReasonCircuitOpen
			if err == perkey.ErrTurn {
				// Not a refusal: the key has just recovered, and this
				// request waits its turn behind those that waited for it.
				why = reasonNone
			}
			cause := r.refused(err)
			trs, err = r.waitFor(why, r.lane.Wait)
			r.report(trs) // whatever came of the wait
			trs = perkey.Transitions{}
			switch {
			case err == perkey.ErrOpen || err == perkey.ErrIsolated || r.req.Context().Err() != nil:
				// The wait ended unanswered: the refusal it waited out.
				return r.waitRefused(err, cause)
			case err != nil && !errors.As(err, new(*perkey.HeldError)):
				return r.refused(err)
			}
		}
	}
}

// refused turns a refusal of the key's lane into the transport's error,
// counting the circuit's refusals; nil stays nil, and the context's error
// stays as it is.
func (r *retrier) refused(err error) error {
	switch err {
	case nil:
		return nil
	case perkey.ErrOpen:
		r.t.stats.circuitRejected.Add(1)
		return ErrCircuitOpen
	case perkey.ErrIsolated:
		r.t.stats.circuitRejected.Add(1)
		return errIsolated
	case perkey.ErrSlots:
		return errConcurrencyLimit
	case perkey.ErrPaced:
		return errPaced
	case perkey.ErrTurn:
		return errTurn
	}
	return err
}

// localHeader marks a response made by this transport rather than by the
// server: its value says why ("circuit-open", or "held" for a hold).
const localHeader = "X-Retryhttp-Local"

// localOpenResponse is the 503 a request gets, with
// WithCircuitOpenResponse, when the circuit of its key is open, or its key
// held, until probeAt: it tells an SDK above when to come back, in the
// headers SDKs read, and is marked as local. The wait it gives is spread by
// up to spread past probeAt, so that the callers refused together do not
// come back together, and rounded up, so that a caller that waits exactly
// what it is told never comes back before the circuit lets it through.
func localOpenResponse(req *http.Request, key hostKey, probeAt time.Time, spread time.Duration, reason Reason) *http.Response {
	wait := max(time.Until(probeAt), 0) + uniform(0, spread)
	ms := strconv.FormatInt(int64((wait+time.Millisecond-1)/time.Millisecond), 10)
	secs := strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10)
	why := "circuit-open"
	if reason == ReasonHeld {
		why = "held"
	}
	msg := "retryhttp: " + reason.String() + " for " + key.String() + "; retry after " + secs + " s"
	body, _ := json.Marshal(map[string]map[string]string{"error": {"type": "api_error", "code": strings.ReplaceAll(why, "-", "_"), "message": msg}})
	h := http.Header{
		"Content-Type":      {"application/json"},
		"Retry-After":       {secs},
		"Retry-After-Ms":    {ms},
		"X-Amz-Retry-After": {ms},
		"X-Amzn-ErrorType":  {"ServiceUnavailable"}, // names the error for aws-sdk-go-v2's JSON protocols
		localHeader:         {why},
	}
	return &http.Response{
		Status:        "503 Service Unavailable",
		StatusCode:    http.StatusServiceUnavailable,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(string(body))),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// maxWaitLeft returns how much longer the request may wait for its key:
// what is left of its wait allowance (WithMaxWait), and no longer than
// until its key has been failing for that long.
//
// A failure is young while the key has been failing for less than the
// longest a request would wait for it, and sustained after: its probes
// and tests, spaced by the open time that grows with the outage, have
// failed for longer than any request was willing to wait. A young failure
// is waited out, past the request's attempts if need be (see rideOut); a
// sustained one fails fast: new requests are refused at once, and those
// already waiting are handed back their failure at that instant, not at
// the end of their own allowance. Outage lengths are heavy-tailed: the
// longer a key has been down, the longer it is likely to stay down, and a
// request that waits for it only holds its caller's concurrency.
func (r *retrier) maxWaitLeft() time.Duration {
	if r.req.Context().Err() != nil {
		return 0
	}
	left := r.s.maxWait - r.waits.total
	if left > 0 && r.lane != nil {
		if since, _ := r.lane.FailingSince(); !since.IsZero() {
			left = min(left, r.s.maxWait-time.Since(since))
		}
	}
	return left
}

// waitUntil returns when a wait beginning at now must end: when the
// request's wait allowance or its context's deadline runs out, whichever
// comes first.
func (r *retrier) waitUntil(now time.Time) time.Time {
	until := now.Add(r.maxWaitLeft())
	if dl, ok := r.req.Context().Deadline(); ok && dl.Before(until) {
		until = dl
	}
	return until
}

// waitFor waits for the key, through f (the lane's Wait or Queue), for
// the reason cause; it counts the wait, reports it to the hooks, and adds
// it to the request's total. On success the attempt is admitted.
func (r *retrier) waitFor(cause Reason, f func(ctx context.Context, lim perkey.Limits, until time.Time) (perkey.Ticket, perkey.Transitions, error)) (perkey.Transitions, error) {
	start := time.Now()
	r.t.stats.wait.count.Add(1)
	r.waits.any = true
	tk, trs, err := f(r.req.Context(), r.limits(), r.waitUntil(start))
	d := time.Since(start)
	r.waits.total += d
	r.t.stats.wait.nanos.Add(uint64(d))
	r.adm.ticket, r.adm.ok = tk, err == nil
	if err == nil {
		r.t.stats.wait.released.Add(1)
	}
	fire(r.hooks, (*Hooks).waitDone, Event{Request: r.req, Key: r.keyOf().String(), Reason: cause, Waited: d, Released: err == nil})
	return trs, err
}

// waitRefused turns the end of a wait that was not answered into the
// request's error: the refusal it waited out (cause), with the wait it
// took, and the context's deadline if that is what ended it. A caller who
// cancelled gets the context's own error, as for any other wait.
func (r *retrier) waitRefused(err, cause error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return &waitedError{cause: cause, waited: r.waits.total, err: err}
	case r.pastDeadline():
		// The wait's end was the deadline: its own timer, set for that
		// instant, fired before the context's.
		return &waitedError{cause: cause, waited: r.waits.total, err: context.DeadlineExceeded}
	}
	return &waitedError{cause: cause, waited: r.waits.total}
}

// pastDeadline reports whether the request's context has a deadline that
// has come.
func (r *retrier) pastDeadline() bool {
	dl, ok := r.req.Context().Deadline()
	return ok && !time.Now().Before(dl)
}

// sleep waits d before an attempt, ending early when the context ends or
// the key's circuit opens. Afterwards the request takes the key's lane
// afresh, in case the one it held left memory before it slept.
func (r *retrier) sleep(d time.Duration) error {
	ctx := r.req.Context()
	if r.lane == nil {
		return perkey.Sleep(ctx, d)
	}
	err := r.lane.Sleep(ctx, d, false)
	r.lane = r.t.lanes.Lane(r.keyOf())
	if err == perkey.ErrOpen {
		// Counted as a refusal: the circuit ended the wait.
		r.t.stats.circuitRejected.Add(1)
		err = ErrCircuitOpen
	}
	return err
}

// sleepThrough waits d before a ride-out attempt, ending early when the
// context ends, or, with nil, when the key answers another request (it is
// back: the attempt goes at once); then the request takes the key's lane
// afresh, as after sleep.
func (r *retrier) sleepThrough(d time.Duration) error {
	if r.lane == nil {
		return perkey.Sleep(r.req.Context(), d)
	}
	err := r.lane.Sleep(r.req.Context(), d, true)
	r.lane = r.t.lanes.Lane(r.keyOf())
	return err
}

// waiting is what a request's waits for its key have come to: kept, the
// latest response, its body read into memory, while the request waits
// (what the caller gets if the wait ends unanswered); total, how long it
// has waited in all; any, whether it has waited at all.
type waiting struct {
	kept  *http.Response
	total time.Duration
	any   bool
}
