package sdk

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Request is what the scripted server recorded of one request it received.
type Request struct {
	N      int // 1 for the first request the server received
	PathN  int // 1 for the first request to this path
	Method string
	Path   string
	Header http.Header
	Body   []byte // read completely before the reply is chosen
	// AWS.
	Authorization string // SigV4 "AWS4-HMAC-SHA256 Credential=…, Signature=…"
	AmzDate       string // X-Amz-Date
	ContentSHA256 string // x-amz-content-sha256: a hex hash or a marker such as UNSIGNED-PAYLOAD
	SDKRequest    string // amz-sdk-request: "attempt=N; max=M"
	InvocationID  string // amz-sdk-invocation-id: one per SDK operation
	Target        string // X-Amz-Target (DynamoDB)
	// Stripe and OpenAI.
	IdempotencyKey string
	RetryCount     string // X-Stainless-Retry-Count (OpenAI)
}

// Reply is the server's answer to one request.
type Reply struct {
	Status int
	Header map[string]string
	Body   []byte
}

// Script chooses the reply to a request.
type Script func(r *Request) Reply

// Always answers every request with rep.
func Always(rep Reply) Script { return func(*Request) Reply { return rep } }

// FailThen answers the first n requests with fail and the others with ok.
func FailThen(n int, fail, ok Reply) Script {
	return func(r *Request) Reply {
		if r.N <= n {
			return fail
		}
		return ok
	}
}

// Sequence answers the n-th request with reps[n-1]; the last reply repeats.
func Sequence(reps ...Reply) Script {
	return func(r *Request) Reply { return reps[min(r.N, len(reps))-1] }
}

// ByPath answers each path with its own script, counting requests per path
// (Request.PathN), and other paths with fallback.
func ByPath(routes map[string]Script, fallback Script) Script {
	return func(r *Request) Reply {
		if s, ok := routes[r.Path]; ok {
			per := *r
			per.N = r.PathN
			return s(&per)
		}
		return fallback(r)
	}
}

// Server is a scripted loopback HTTP server that records every request and
// every connection it sees.
type Server struct {
	*httptest.Server
	script Script

	mu     sync.Mutex
	reqs   []Request
	paths  map[string]int
	conns  map[net.Conn]http.ConnState // the latest state of each connection
	opened int
}

// NewServer starts a server on 127.0.0.1 that answers by script. It is
// closed when the test ends.
func NewServer(t testing.TB, script Script) *Server {
	s := &Server{script: script, paths: map[string]int{}, conns: map[net.Conn]http.ConnState{}}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.Config.ConnState = s.connState
	s.Start() // httptest listens on 127.0.0.1:0
	t.Cleanup(s.Close)
	return s
}

func (s *Server) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		// A client that sent a broken body gets a 400 and is recorded.
		body = append(body, "\n<read error: "+err.Error()+">"...)
	}
	h := req.Header
	s.mu.Lock()
	s.paths[req.URL.Path]++
	r := Request{
		N: len(s.reqs) + 1, PathN: s.paths[req.URL.Path],
		Method: req.Method, Path: req.URL.Path, Header: h.Clone(), Body: body,
		Authorization:  h.Get("Authorization"),
		AmzDate:        h.Get("X-Amz-Date"),
		ContentSHA256:  h.Get("X-Amz-Content-Sha256"),
		SDKRequest:     h.Get("Amz-Sdk-Request"),
		InvocationID:   h.Get("Amz-Sdk-Invocation-Id"),
		Target:         h.Get("X-Amz-Target"),
		IdempotencyKey: h.Get("Idempotency-Key"),
		RetryCount:     h.Get("X-Stainless-Retry-Count"),
	}
	s.reqs = append(s.reqs, r)
	s.mu.Unlock()

	rep := Reply{Status: http.StatusBadRequest, Body: []byte("unreadable body\n")}
	if err == nil {
		rep = s.script(&r)
	}
	for k, v := range rep.Header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rep.Status)
	w.Write(rep.Body)
}

func (s *Server) connState(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st == http.StateNew {
		s.opened++
	}
	s.conns[c] = st
}

// Requests returns a copy of what the server has recorded so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Opened returns how many connections clients have opened.
func (s *Server) Opened() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened
}

// WaitAllClosed waits up to d for every connection to be closed (or
// hijacked), and returns how many are still open. Call it after the client
// closed its idle connections: a connection still open then is one the
// client holds busy, typically for a response body never closed.
func (s *Server) WaitAllClosed(d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		open := 0
		s.mu.Lock()
		for _, st := range s.conns {
			if st != http.StateClosed && st != http.StateHijacked {
				open++
			}
		}
		s.mu.Unlock()
		if open == 0 || time.Now().After(deadline) {
			return open
		}
		time.Sleep(5 * time.Millisecond)
	}
}
