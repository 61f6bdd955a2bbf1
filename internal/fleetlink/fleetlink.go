// Package fleetlink is the contract between the root package's breakers
// and budgets and package fleet, which shares what they learn between
// processes. The root package imports fleet, since WithFleet takes a
// *fleet.Fleet, so fleet cannot import the root: each reaches the other
// only through the types here, and neither gains an exported name for it.
//
// The root wraps its Breaker and Budget in unexported types that implement
// Breaker and Budget, and calls Join when New is given a fleet; package
// fleet sets Join, and hands each breaker the function through which it
// announces its own changes.
package fleetlink

import "time"

// Kind says what a Change announces. Its values are those of
// fleet.ChangeKind, so that the fleet converts one into the other.
type Kind int

// The kinds of change.
const (
	Alive   Kind = iota + 1 // the instance is alive for For
	Failing                 // the instance saw the key fail; the report counts for For
	Open                    // the key's circuit opened for For
	Close                   // the key's circuit closed Age ago
	Hold                    // the key is held for For
	Demand                  // the instance paces the key at an advertised quota, for For
)

// Change is one fact about a key that a breaker announces or adopts:
// fleet.Change without the instance, which only the fleet deals in.
type Change struct {
	Kind      Kind
	Key       string
	For       time.Duration // Failing, Open, Hold: how long from now
	Age       time.Duration // Close: how long ago
	Reporters int           // Open: distinct instances that reported the key failing
}

// Breaker is what a fleet calls on a breaker it shares.
type Breaker interface {
	// Join makes the breaker announce the changes its requests make
	// through announce, and take the part of each key's advertised quota
	// it may spend from share, unless it has joined a fleet already, and
	// reports whether it did: a breaker shares through one fleet only.
	Join(announce func(Change), share func(key string) float64) bool
	// Adopt applies a change another process announced; quorum says
	// whether enough instances reported the key failing for an open to
	// open a closed circuit here. It reports whether anything changed.
	Adopt(c Change, quorum bool, now time.Time) bool
}

// Budget is what a fleet calls on a budget it shares.
type Budget interface {
	// Join reports whether the budget had joined no fleet, and has now:
	// a budget is shared through one fleet only.
	Join() bool
	// Share divides the budget's floor, the floor's burst and its cap by
	// n, the number of processes in the fleet.
	Share(n int)
}

// Join makes f, a *fleet.Fleet, share b and bu; either may be nil. Package
// fleet sets it when it is initialised, which is before any code of the
// root package runs, since the root imports fleet.
var Join func(f any, b Breaker, bu Budget)
