package perkey

import "time"

// State is the state of a key's circuit, or its hold.
type State uint8

// The states, in the order of the root package's State values.
const (
	Closed   State = iota // requests pass; failures are counted
	Open                  // requests are refused without touching the network
	HalfOpen              // a few probes pass; the rest are refused
	Held                  // the server asked for no requests until an instant
)

// Transition is a change of state, returned so that it is reported after
// the lane's lock is released. From == To means no change, unless Failing
// or Extended says what else happened.
type Transition struct {
	From, To State
	// Until is when a hold or an open circuit ends, for a change to Held
	// or Open; the zero time for an isolation, which has no end.
	Until time.Time
	// Failing: a failure period began (or the circuit opened on one); a
	// fleet is told, nobody else.
	Failing bool
	// Extended: another process's open extended this open circuit's time.
	Extended bool
}

// Changed reports whether the transition is a change of state.
func (t Transition) Changed() bool { return t.From != t.To }

// Circuit reports whether the transition is a change of the circuit's
// state: not a hold beginning or ending, beside the circuit.
func (t Transition) Circuit() bool { return t.Changed() && t.From != Held && t.To != Held }

// Transitions is the changes one call made: at most three (a hold the
// response asks for, then a hold ending as the circuit half-opens; a hold
// and an isolation ending together). The
// zero value is none, which is what the success path returns: changes are
// rare, so they are kept out of line, and a call that made none returns
// one nil pointer.
type Transitions struct{ c *changes }

type changes struct {
	n    int
	list [3]Transition
}

// Any reports whether the call made a change, or began a failure period.
func (ts Transitions) Any() bool { return ts.c != nil }

// List returns the changes in the order they were made.
func (ts Transitions) List() []Transition {
	if ts.c == nil {
		return nil
	}
	return ts.c.list[:ts.c.n]
}

// add appends t if it says anything.
func (ts *Transitions) add(t Transition) {
	if !t.Changed() && !t.Failing && !t.Extended {
		return
	}
	if ts.c == nil {
		ts.c = new(changes)
	}
	ts.c.list[ts.c.n] = t
	ts.c.n++
}

// merge appends the changes of o.
func (ts *Transitions) merge(o Transitions) {
	for _, t := range o.List() {
		ts.add(t)
	}
}

// one returns t alone as Transitions.
func one(t Transition) Transitions {
	var ts Transitions
	ts.add(t)
	return ts
}
