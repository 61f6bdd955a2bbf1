package retryhttptest

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"
)

// defaultChunkSize is the body write size used when Action.ChunkSize is zero.
const defaultChunkSize = 32 << 10

// respond carries out a. It gives up, counting the response as abandoned,
// as soon as the client goes away.
func (h *Handler) respond(w http.ResponseWriter, r *http.Request, a Action) {
	ctx := r.Context()
	if a.HeaderDelay > 0 && !pause(ctx, a.HeaderDelay) {
		h.abandoned.Add(1)
		return
	}
	if a.Fault == ResetAfterRequest {
		reset(w)
		return
	}

	status := a.Status
	if status == 0 {
		status = http.StatusOK
	}
	body := a.Body
	size := int64(len(body))
	if a.BodySize > 0 {
		body, size = nil, a.BodySize
	} else if body == nil {
		body = []byte(http.StatusText(status) + "\n")
		size = int64(len(body))
	}

	hdr := w.Header()
	for k, v := range a.Header {
		hdr[k] = append([]string(nil), v...)
	}
	if a.RetryAfter > 0 {
		hdr.Set("Retry-After", retryAfter(h.now(), a.RetryAfter, a.RetryAfterDate))
	}
	allowed := bodyAllowed(status)
	if allowed {
		hdr.Set("Content-Length", strconv.FormatInt(size, 10))
	}
	if !allowed || r.Method == http.MethodHead {
		size = 0 // Nothing to write; net/http would discard it anyway.
	}
	limit := size
	if a.Fault == ResetMidBody {
		limit = size / 2
	}

	rc := http.NewResponseController(w)
	w.WriteHeader(status)
	if a.ChunkDelay > 0 || a.Fault == ResetMidBody {
		if !flush(rc) {
			h.abandoned.Add(1)
			return
		}
	}

	chunk := int64(a.ChunkSize)
	if chunk <= 0 {
		chunk = defaultChunkSize
	}
	var gen []byte // reusable chunk of the generated body
	if body == nil {
		gen = make([]byte, min(chunk, limit))
		for i := range gen {
			gen[i] = 'x'
		}
	}
	for off := int64(0); off < limit; {
		if a.ChunkDelay > 0 && !pause(ctx, a.ChunkDelay) {
			h.abandoned.Add(1)
			return
		}
		if ctx.Err() != nil {
			h.abandoned.Add(1)
			return
		}
		n := min(chunk, limit-off)
		var p []byte
		if body != nil {
			p = body[off : off+n]
		} else {
			p = gen[:n]
		}
		m, err := w.Write(p)
		h.written.Add(int64(m))
		off += int64(m)
		if err != nil || !flush(rc) {
			h.abandoned.Add(1)
			return
		}
	}
	if a.Fault == ResetMidBody {
		reset(w)
	}
}

// pause waits for d or until ctx is done, and reports whether it waited in
// full.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// flush flushes buffered response data to the connection and reports
// whether that worked (or flushing is not supported).
func flush(rc *http.ResponseController) bool {
	err := rc.Flush()
	return err == nil || errors.Is(err, http.ErrNotSupported)
}

// reset hijacks the connection and closes it with SO_LINGER 0, so the peer
// gets a TCP RST instead of an orderly FIN.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // Best effort: net/http closes the connection.
	}
	if nc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = nc.NetConn() // Skip TLS close_notify: reset the TCP connection.
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// retryAfter formats d as a Retry-After value, as delta-seconds or as an
// HTTP-date relative to now, rounding up to whole seconds.
func retryAfter(now time.Time, d time.Duration, date bool) string {
	if date {
		t := now.Add(d)
		if u := t.Truncate(time.Second); !u.Equal(t) {
			t = u.Add(time.Second)
		}
		return t.UTC().Format(http.TimeFormat)
	}
	return strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10)
}

// bodyAllowed reports whether a response with this status may have a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}
