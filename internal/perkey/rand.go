package perkey

import (
	"math/rand/v2"
	"time"
)

// Uniform returns a duration drawn uniformly from [lo, lo+width); width <= 0
// yields lo. It is safe for concurrent use.
func Uniform(lo, width time.Duration) time.Duration {
	if width <= 0 {
		return lo
	}
	// math/rand/v2's generator is seeded per process, so that processes
	// forked from one parent do not draw the same delays.
	return lo + time.Duration(rand.Int64N(int64(width)))
}
