package attempt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The HTTP/2 frames the raw server reads and writes (RFC 9113 §6).
const (
	h2Data         = 0x0
	h2Headers      = 0x1
	h2RSTStream    = 0x3
	h2Settings     = 0x4
	h2Ping         = 0x6
	h2GoAway       = 0x7
	h2WindowUpdate = 0x8
	h2FlagAck      = 0x1 // SETTINGS, PING
	h2FlagEnd      = 0x1 // END_STREAM, on HEADERS
	h2FlagHeaders  = 0x4 // END_HEADERS
	h2EnhanceCalm  = 0xb
	h2Status200    = 0x88 // HPACK: the static table's ":status: 200" (RFC 7541 Appendix A)
	h2ClientPrefix = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

// refusal is how the raw server turns away a request stream.
type refusal int

const (
	refuseStream    refusal = iota // RST_STREAM with REFUSED_STREAM
	goAwayAbove                    // GOAWAY, NO_ERROR, last stream ID below the stream's
	goAwayAboveCalm                // the same with ENHANCE_YOUR_CALM
	goAwayCovering                 // GOAWAY, NO_ERROR, last stream ID the stream's, then the connection closes
)

// rawH2 is a minimal HTTP/2 server with prior knowledge, on in-memory
// connections (net.Pipe), so that it runs in a synctest bubble: while
// refusing is set it turns away every request stream as how says; then it
// answers 200 and counts the request body's bytes.
type rawH2 struct {
	how      refusal
	limit    int64 // refuse only the first limit streams; 0: no limit
	refusing atomic.Bool
	streams  atomic.Int64 // request streams received, on every connection
	mu       sync.Mutex
	accepted []int      // body bytes of each stream answered 200; guarded by mu
	conns    []net.Conn // the server's ends; guarded by mu
	wg       sync.WaitGroup
}

// close closes every connection and waits for their goroutines.
func (s *rawH2) close() {
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// dial is the client's DialContext: a new in-memory connection served by
// s.
func (s *rawH2) dial(context.Context, string, string) (net.Conn, error) {
	client, server := net.Pipe()
	s.mu.Lock()
	s.conns = append(s.conns, server)
	s.mu.Unlock()
	s.wg.Go(func() { s.serve(server) })
	return client, nil
}

// frameWriter reads from the connection and queues what it writes for
// the connection's writer goroutine.
type frameWriter struct {
	conn net.Conn
	out  chan<- []byte
}

func (w frameWriter) Read(p []byte) (int, error) { return w.conn.Read(p) }

func (w frameWriter) Write(p []byte) (int, error) {
	w.out <- bytes.Clone(p)
	return len(p), nil
}

func writeFrame(w io.Writer, typ, flags byte, stream uint32, payload []byte) error {
	var h [9]byte
	h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	h[3], h[4] = typ, flags
	binary.BigEndian.PutUint32(h[5:], stream)
	_, err := w.Write(append(h[:], payload...))
	return err
}

func (s *rawH2) serve(conn net.Conn) {
	// An HTTP/2 peer reads while it writes, and a pipe's write waits for
	// the read: the frames go out through their own goroutine, which
	// closes the connection when it finds a nil frame (the reads go on
	// meanwhile, so that the client is never stuck writing).
	out := make(chan []byte, 64)
	var writer sync.WaitGroup
	writer.Go(func() {
		for f := range out {
			if f == nil {
				break
			}
			if _, err := conn.Write(f); err != nil {
				break
			}
		}
		conn.Close()
		for range out {
		}
	})
	defer func() {
		close(out)
		writer.Wait()
		conn.Close()
	}()
	c := frameWriter{conn: conn, out: out}
	preface := make([]byte, len(h2ClientPrefix))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != h2ClientPrefix {
		return
	}
	if writeFrame(c, h2Settings, 0, 0, nil) != nil {
		return
	}
	body := map[uint32]int{} // DATA bytes of the streams to be answered
	var h [9]byte
	for {
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		typ, flags, stream := h[3], h[4], binary.BigEndian.Uint32(h[5:])&(1<<31-1)
		payload := make([]byte, n)
		if _, err := io.ReadFull(c, payload); err != nil {
			return
		}
		var err error
		switch {
		case typ == h2Settings && flags&h2FlagAck == 0:
			err = writeFrame(c, h2Settings, h2FlagAck, 0, nil)
		case typ == h2Ping && flags&h2FlagAck == 0:
			err = writeFrame(c, h2Ping, h2FlagAck, 0, payload)
		case typ == h2Headers:
			nth := s.streams.Add(1)
			if !s.refusing.Load() || s.limit > 0 && nth > s.limit {
				body[stream] = 0
				if flags&h2FlagEnd != 0 { // no body
					err = s.answer(c, stream, body)
				}
				break
			}
			err = s.refuse(c, stream)
		case typ == h2Data:
			// Give the connection's flow-control window back: the DATA
			// of refused streams counts against it too.
			if n > 0 {
				err = writeFrame(c, h2WindowUpdate, 0, 0, binary.BigEndian.AppendUint32(nil, uint32(n)))
			}
			if got, ok := body[stream]; ok && err == nil {
				body[stream] = got + n
				if flags&h2FlagEnd != 0 {
					err = s.answer(c, stream, body)
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// answer ends the stream with a 200 and records its body's length.
func (s *rawH2) answer(c io.Writer, stream uint32, body map[uint32]int) error {
	s.mu.Lock()
	s.accepted = append(s.accepted, body[stream])
	s.mu.Unlock()
	delete(body, stream)
	return writeFrame(c, h2Headers, h2FlagHeaders|h2FlagEnd, stream, []byte{h2Status200})
}

// refuse turns the stream away; for goAwayCovering the connection closes
// after the GOAWAY has gone.
func (s *rawH2) refuse(c frameWriter, stream uint32) error {
	goAway := func(last uint32, code uint32) error {
		p := binary.BigEndian.AppendUint32(nil, last)
		return writeFrame(c, h2GoAway, 0, 0, binary.BigEndian.AppendUint32(p, code))
	}
	var before uint32 // the stream before, or 0 for the first: streams are odd
	if stream > 2 {
		before = stream - 2
	}
	switch s.how {
	case refuseStream:
		return writeFrame(c, h2RSTStream, 0, stream, binary.BigEndian.AppendUint32(nil, h2RefusedStream))
	case goAwayAbove:
		return goAway(before, 0)
	case goAwayAboveCalm:
		return goAway(before, h2EnhanceCalm)
	}
	err := goAway(stream, 0)
	c.out <- nil
	return err
}

// A POST whose HTTP/2 stream the server never processed is one that never
// reached it, when net/http hands the error up: a stream refused with
// REFUSED_STREAM, once net/http's own seven tries (about a minute of
// backoff) have given up, and a connection's first stream above a GOAWAY
// with an error code, which net/http does not retry; sent again, its body
// arrives whole, once. A stream above a graceful GOAWAY never fails: net/http
// sends it again on a new connection by itself (the server turns away the
// first three). A stream a GOAWAY covers (the server may have processed it)
// is not one that never reached the server.
func TestH2UnprocessedNeverReached(t *testing.T) {
	cases := []struct {
		name         string
		how          refusal
		limit        int64
		errText      string // in the first attempt's error; "": it succeeds; "*": any error
		neverReached bool
	}{
		{"REFUSED_STREAM", refuseStream, 0, "REFUSED_STREAM", true},
		{"GOAWAY above the first stream, with an error code", goAwayAboveCalm, 0, h2GoAwayFirst + "ENHANCE_YOUR_CALM", true},
		{"GOAWAY above the stream, graceful", goAwayAbove, 3, "", false},
		// The client sees the GOAWAY, or its write fails on the closed
		// connection first: either way, an error that proves nothing.
		{"GOAWAY covering the stream", goAwayCovering, 0, "*", false},
	}
	payload := bytes.Repeat([]byte("p"), 10_000)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &rawH2{how: c.how, limit: c.limit}
				srv.refusing.Store(true)
				protocols := new(http.Protocols)
				protocols.SetUnencryptedHTTP2(true)
				next := &http.Transport{Protocols: protocols, DialContext: srv.dial}
				defer func() {
					next.CloseIdleConnections()
					srv.close()
				}()

				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://h2.test/items", bytes.NewReader(payload))
				require.NoError(t, err)
				var b Body
				b.First(req, 2, 0)
				start := time.Now()
				resp, err := Send(next, b.Take(), 0, ctx)
				took := time.Since(start)
				srv.refusing.Store(false) // a second attempt is answered
				if c.errText == "" {
					require.NoError(t, err)
					resp.Body.Close()
					assert.Equal(t, c.limit+1, srv.streams.Load(), "net/http sent it again by itself")
					return
				}
				require.Error(t, err)
				if c.errText != "*" {
					assert.True(t, strings.Contains(err.Error(), c.errText), "the first attempt's error: %v", err)
				}
				assert.Equal(t, c.neverReached, NeverReached(err), "never reached: %v", err)
				if !c.neverReached {
					return
				}
				require.Equal(t, Ready, b.Next())
				resp, err = Send(next, b.Take(), 0, ctx)
				require.NoError(t, err)
				resp.Body.Close()
				assert.Equal(t, http.StatusOK, resp.StatusCode)
				srv.mu.Lock()
				defer srv.mu.Unlock()
				assert.Equal(t, []int{len(payload)}, srv.accepted, "the body arrives whole, once")
				t.Logf("%d streams in all; net/http's own tries took %v of virtual time", srv.streams.Load(), took)
			})
		})
	}
}

// h2Unprocessed against errors built here: a wrapped graceful GOAWAY text
// is found; other errors are not taken for one.
func TestH2UnprocessedTexts(t *testing.T) {
	assert.True(t, h2Unprocessed(errors.Join(io.EOF, errors.New(h2GoAwayGraceful))))
	assert.False(t, h2Unprocessed(errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=1, ErrCode=NO_ERROR, debug=\"\"")))
	assert.False(t, h2Unprocessed(h2StreamError{StreamID: 1, Code: 0x8}), "CANCEL is not REFUSED_STREAM")
	assert.False(t, h2Unprocessed(io.ErrUnexpectedEOF))
}
