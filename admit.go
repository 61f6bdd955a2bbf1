package retryhttp

import (
	"encoding/json"
	"errors"
	"io"
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
	lim.Queue = r.s.maxWait > r.waits.total
	return lim
}

// admitSlow finishes an admission that made changes or was refused: it
// reports the changes; while the key is held it waits for the hold's end,
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
			wait, ok := r.lane.HeldWait(e, r.s.retryAfterSpread, held, r.s.maxRetryAfter+r.s.retryAfterSpread, dl)
			if !ok {
				return &heldError{until: e.Until}
			}
			if serr := r.sleep(wait); serr != nil && serr != ErrCircuitOpen {
				return serr
			}
			held += wait
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
				why = ReasonNone
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
		return ErrConcurrencyLimit
	case perkey.ErrPaced:
		return errPaced
	case perkey.ErrTurn:
		return errTurn
	}
	return err
}

// report passes the changes a call to the key's lane made to the hooks,
// to BreakerConfig.OnStateChange and to a fleet, after the lane's lock has
// been released. Most calls make none.
func (r *retrier) report(trs perkey.Transitions) {
	if trs.Any() {
		r.reportAll(trs)
	}
}

func (r *retrier) reportAll(trs perkey.Transitions) {
	for _, tr := range trs.List() {
		if tr.Circuit() && r.hooks.any() {
			fire(r.hooks, (*Hooks).circuitChange, CircuitChangeInfo{Key: r.keyOf().String(), From: State(tr.From), To: State(tr.To), Until: tr.Until})
		}
		if r.t.breaker != nil {
			r.t.breaker.notify(r.lane, tr, true)
		}
	}
}

// LocalHeader marks a response made by this transport rather than by the
// server: its value says why ("circuit-open", or "held" for a hold).
const LocalHeader = "X-Retryhttp-Local"

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
		LocalHeader:         {why},
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
