// Package perkey owns everything the transport remembers about a key (by
// default scheme://host[:port]): the circuit, the hold, the send rate and
// the attempts in flight, the previous delay a policy grows from, and where
// RetryAt has sent the key's callers back. Nothing outside this package
// reads or writes that state except through its methods.
//
// A request deals with its key's Lane in two steps, in the manner of
// gobreaker's two-step breaker: Admit hands out a Ticket (or refuses), and
// Done records the outcome of the attempt the Ticket admitted, exactly
// once; Done also frees what the Ticket held (a half-open probe's place, a
// place among the attempts in flight). Every call that changes a state
// returns the Transitions it made, so that the caller reports them after
// the lane's lock is released, never under it.
package perkey

// One file per mechanism: key.go (the key and its parsing), table.go (the
// bounded table and how entries leave it), lane.go (the lane, its fast
// path and what an outcome tells it), admit.go (what an attempt waits for
// before it goes, in order: each mechanism's own check stays in its file),
// circuit.go (the states and the changes a call reports; trip, open, how
// long it stays open, half-open and the one close rule), throttle.go
// (how a server's answers throttle its key: the quota it advertises, and
// when a response holds the key or cuts its send rate), hold.go (the
// hold), pace.go (the adaptive send rate), slots.go (the concurrency
// limit), queue.go (the one waiter queue they and the lane use), wait.go
// (requests that wait for a key to recover, and their release),
// recovery.go (the rate of that release), bucket.go (the token bucket both
// timed releases share), calendar.go (RetryAt's spread), slowcall.go (the
// slow-call rule and the key's answer time) and view.go (one locked read
// of a lane).
