package perkey

import (
	"time"

	"golang.org/x/time/rate"
)

// releaseSlack is how late a release timer may fire without losing the
// releases that fell due meanwhile. A timer of a fraction of a
// millisecond fires a millisecond or more late on a busy machine; with a
// burst of one, every late firing would release one request where
// several were due, and a rate of 3,000/s would let go 800/s.
const releaseSlack = 10 * time.Millisecond

// setRate sets lim's rate at now, and its burst to what that rate
// releases over releaseSlack, at least one.
func setRate(lim *rate.Limiter, now time.Time, r float64) { setRateBurst(lim, now, r, 1) }

// setRateBurst is setRate with a burst of at least least. The burst is set
// once: a smaller one set on the way would cut the tokens the bucket holds
// to it.
func setRateBurst(lim *rate.Limiter, now time.Time, r float64, least int) {
	lim.SetLimitAt(now, rate.Limit(r))
	lim.SetBurstAt(now, max(least, int(r*releaseSlack.Seconds())))
}

// nextToken returns how long until lim has a token, at its rate.
func nextToken(lim *rate.Limiter, now time.Time) time.Duration {
	missing := 1 - lim.TokensAt(now)
	if missing <= 0 {
		return 0
	}
	return time.Duration(missing / float64(lim.Limit()) * float64(time.Second))
}
