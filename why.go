package retryhttp

import (
	"errors"
	"net/http"
	"runtime"
	"sync"
	"weak"
)

// Why says why RoundTrip handed resp, or err, back unretried, with the
// Reason an Error would carry: ReasonNotRetryable for a status of 400 or
// above that WithRetryIf does not retry; the zero Reason for a success or
// an error not of this transport's. It knows a response the caller holds.
func (t *Transport) Why(resp *http.Response, err error) Reason {
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return e.Reason
		}
		return reasonNone
	}
	if resp == nil {
		return reasonNone
	}
	if why, ok := t.whys.get(resp); ok {
		return why
	}
	if resp.StatusCode >= 400 && t.s.retryIf != nil && !t.s.retryIf(resp, nil) {
		return ReasonNotRetryable
	}
	return reasonNone
}

// whyTable remembers why each response handed back after a failure was
// not retried, for as long as the response lives: it is keyed by a weak
// pointer, and an entry is dropped when its response is collected. Only
// responses that end a failure are put in it, never a success.
type whyTable struct {
	mu sync.Mutex
	m  map[weak.Pointer[http.Response]]Reason // guarded by mu
}

func (w *whyTable) set(resp *http.Response, why Reason) {
	p := weak.Make(resp)
	w.mu.Lock()
	if w.m == nil {
		w.m = map[weak.Pointer[http.Response]]Reason{}
	}
	w.m[p] = why
	w.mu.Unlock()
	runtime.AddCleanup(resp, w.drop, p)
}

func (w *whyTable) drop(p weak.Pointer[http.Response]) {
	w.mu.Lock()
	delete(w.m, p)
	w.mu.Unlock()
}

func (w *whyTable) get(resp *http.Response) (Reason, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	why, ok := w.m[weak.Make(resp)]
	return why, ok
}
