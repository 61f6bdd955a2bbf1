package retryhttp

import (
	"context"
	"slices"
)

// requestKey is the context key of what one request carries for the
// transport: its hooks and its options, in one value so that RoundTrip
// looks the context up once.
type requestKey struct{}

type perRequest struct {
	hooks *Hooks
	opts  []RequestOption
}

// perRequestOf returns a copy of what ctx carries for the transport, or an
// empty one.
func perRequestOf(ctx context.Context) *perRequest {
	pr := &perRequest{}
	if old, ok := ctx.Value(requestKey{}).(*perRequest); ok {
		*pr = *old
		pr.opts = slices.Clone(old.opts)
	}
	return pr
}

// ContextWithOptions returns a copy of ctx that carries options for the
// requests made with it: they apply after the transport's own, to those
// requests only. SDKs pass the caller's context down to the transport, so
// this sets one call's retries through an SDK that hides its requests:
//
//	ctx = retryhttp.ContextWithOptions(ctx, retryhttp.WithMaxAttempts(1)) // no retries for this call
//
// The options a request may take are the RequestOptions: those that shape
// its own retries. Per-request hooks go through ContextWithHooks. Options
// set again through a derived context add to the earlier ones, the later
// winning. A request with no options costs nothing more; one with options
// pays for a copy of the transport's settings.
func ContextWithOptions(ctx context.Context, opts ...RequestOption) context.Context {
	pr := perRequestOf(ctx)
	for _, o := range opts {
		if o != nil {
			pr.opts = append(pr.opts, o)
		}
	}
	return context.WithValue(ctx, requestKey{}, pr)
}

// settings returns the transport's settings with the request's options
// applied.
func (pr *perRequest) settings(base *settings) *settings {
	s := *base
	for _, o := range pr.opts {
		o.applyRequest(&s)
	}
	s.stateful = stateful(s.policy)
	return &s
}
