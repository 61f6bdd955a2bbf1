package bench

import "github.com/retryhttp/retryhttp"

// responseBufferOption is the option under test; replaced when the library
// has it. It stands for an opt-in option that reads a successful
// response's body, up to maxBytes, before RoundTrip returns, and retries an
// attempt whose body was cut. Until then it returns an option the library
// has, which retries nothing once a 200 has arrived, so the scenario's gated
// case (RETRYHTTP_FAULTS=1) fails: the body arrives cut.
func responseBufferOption(maxBytes int64) retryhttp.Option {
	_ = maxBytes
	return retryhttp.WithMaxAttempts(4)
}
