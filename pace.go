package retryhttp

import (
	"context"
	"errors"
)

// errPaced is the cause when a throttled key's send rate leaves no room
// for the attempt before the request's deadline; it satisfies
// errors.Is(err, context.DeadlineExceeded).
var errPaced = &pacedError{}

type pacedError struct{}

func (*pacedError) Error() string {
	return "retryhttp: the key's send rate leaves no room before the deadline"
}
func (*pacedError) Is(target error) bool { return target == context.DeadlineExceeded }

// ErrConcurrencyLimit is wrapped by the error of a request refused because
// its key already had as many attempts in flight as WithConcurrencyLimit
// allows, in its refusing mode.
var ErrConcurrencyLimit = errors.New("retryhttp: concurrency limit reached")
