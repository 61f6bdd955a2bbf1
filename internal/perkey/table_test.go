package perkey

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTableEvictionRacingGet holds an eviction in the middle of its pass,
// at the entry of one host, while a get for that host caches the entry the
// eviction is about to drop. Afterwards the host must be served by the entry
// the map holds, not by the dropped one: two entries for one host would
// split a circuit's state or double a per-host budget.
func TestTableEvictionRacingGet(t *testing.T) {
	target := Key{Scheme: "http", Host: "target.test"}
	var (
		tb      = Table[*int]{Max: 4}
		made    atomic.Int64
		paused  = make(chan struct{})
		resume  = make(chan struct{})
		holding atomic.Bool
	)
	mk := func(Key) *int { v := int(made.Add(1)); return &v }
	first := tb.Get(target, mk)
	tb.Idle = func(v *int, _ time.Time) bool {
		if v == first && holding.CompareAndSwap(false, true) {
			close(paused)
			<-resume
		}
		return true
	}
	// Fill the table; the next insertion evicts, target first.
	for i := 1; i < tb.Max; i++ {
		tb.Get(Key{Scheme: "http", Host: fmt.Sprintf("h%d.test", i)}, mk)
	}
	evicted := make(chan struct{})
	go func() {
		defer close(evicted)
		tb.Get(Key{Scheme: "http", Host: "trigger.test"}, mk)
	}()
	<-paused
	// The eviction holds target's entry: it is still in the map, so this get
	// caches it.
	require.Same(t, first, tb.Get(target, mk))
	close(resume)
	<-evicted

	got := tb.Get(target, mk)
	e, ok := tb.m.Load(target)
	require.True(t, ok, "the host has an entry in the map after the eviction")
	require.Same(t, e.(*entry[*int]).v, got, "the host is served by the map's entry, not a dropped one")
	require.NotSame(t, first, got, "the dropped entry is not handed out")
}

// Keys own their bytes, and an eviction looks at a bounded number of
// entries however large the table: no request waits on a pass over it.
// 5,000 insertions into a table of 1,000 are enough: an eviction that
// looked at the whole ring made 100 idle checks in one insertion when
// tried, as with 20,000, against at most 64.
func TestTableBounded(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	tb := Table[*int]{Max: 1000}
	calls, most := 0, 0
	tb.Idle = func(*int, time.Time) bool { calls++; return calls%50 == 0 } // rarely idle
	for i := range 5_000 {
		calls = 0
		tb.Get(Key{Scheme: "http", Host: fmt.Sprintf("h%d.test", i)}, func(Key) *int { return new(int) })
		most = max(most, calls)
	}
	assert.LessOrEqual(t, most, 2*clockSteps, "idle checks in one insertion")

	raw := "http://owned.test/?secret=" + strings.Repeat("s", 4096)
	k := KeyOf(mustParse(t, raw))
	tb.Get(k, func(Key) *int { return new(int) })
	e, ok := tb.m.Load(k)
	require.True(t, ok)
	kept := e.(*entry[*int]).k.Host
	assert.NotSame(t, unsafe.StringData(k.Host), unsafe.StringData(kept), "the kept key shares the URL's bytes")
}

// An entry just inserted belongs to a request that has not yet used it (a
// lane whose attempt is in flight): the insertions that follow must not
// evict it before its owner gets to it, or the attempt's outcome is recorded
// in a lane the table no longer holds and the host forgets it. Every entry
// here is idle and none is ever got again, the worst case: each stays at
// least until the clock hand has passed it once.
func TestTableKeepsNewEntries(t *testing.T) {
	t.Parallel() // shares nothing with other tests

	const keep = 10 // insertions a new entry survives, at the least
	tb := Table[*int]{Max: 1000, Idle: func(*int, time.Time) bool { return true }}
	mk := func(Key) *int { return new(int) }
	key := func(i int) Key { return Key{Scheme: "http", Host: fmt.Sprintf("h%d.test", i)} }
	for i := range 5000 {
		tb.insert(key(i), mk) // as get does, before it marks the entry used
		if i >= keep {
			_, ok := tb.m.Load(key(i - keep))
			require.True(t, ok, "host %d evicted within %d insertions of its own", i-keep, keep)
		}
	}
	assert.Equal(t, tb.Max, tb.Len(), "entries held")
}

// Hosts that differ in a few bytes anywhere (tenants numbered in the middle
// of a name, short and long) spread over the cache's slots: none holds more
// than twice its share, none is left empty.
func TestCacheSlotSpread(t *testing.T) {
	for _, pattern := range []string{"h%d.test", "tenant-%d.hooks.example.com", "%d.example.test:8443", "api.example.test/%d"} {
		const n = 100 * cacheSlots
		var counts [cacheSlots]int
		for i := range n {
			counts[cacheSlot(fmt.Sprintf(pattern, i))]++
		}
		most, least := slices.Max(counts[:]), slices.Min(counts[:])
		assert.LessOrEqual(t, most, 2*n/cacheSlots, "%s: fullest slot", pattern)
		assert.Positive(t, least, "%s: emptiest slot", pattern)
	}
}
