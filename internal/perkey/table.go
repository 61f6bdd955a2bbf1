package perkey

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// defaultMaxKeys is how many keys a table keeps in memory at once by
// default (see Table.Max). A lane costs a few hundred bytes, so 65,536
// keys stay within about 30 MB, while a dispatcher with tens of thousands
// of active tenants keeps every one that matters.
const defaultMaxKeys = 1 << 16

// clockSteps bounds the entries one insertion looks at to find one to
// evict, so that no request waits on a pass over the whole table.
const clockSteps = 32

// Table is a per-key map whose reads take no lock, for lanes and for a
// budget's per-key buckets. A small direct-mapped cache in front of the
// sync.Map answers the common case (a few keys, each asked for again and
// again) with one string hash and one comparison; a miss falls through to
// the map and caches the entry, which allocates nothing because entries
// are made once. It holds at most Max entries that could be dropped (see
// insert).
type Table[V any] struct {
	cache [cacheSlots]atomic.Pointer[entry[V]]
	m     sync.Map // Key -> *entry[V]
	// Idle reports that an entry may leave: a fresh entry would replace it
	// without loss. It is set before the table is first used.
	Idle func(V, time.Time) bool
	// Max is how many entries are held before idle ones are evicted;
	// 0 means defaultMaxKeys (65,536). It is set before first use.
	Max int

	mu   sync.Mutex
	ring []*entry[V] // every entry, in the order the clock hand visits them; guarded by mu
	hand int         // the next entry the hand visits; guarded by mu
}

// entry is one key's value with its key, so that the cache can check what
// it holds.
type entry[V any] struct {
	k    Key
	v    V
	used atomic.Bool // got since the clock hand last passed
}

const (
	cacheBits  = 6
	cacheSlots = 1 << cacheBits
)

// cacheSeed varies the slots keys take from one process to the next.
var cacheSeed = maphash.Comparable(maphash.MakeSeed(), 0) | 1

// cacheSlot returns the cache slot of a key's host. It mixes eight bytes
// at a time, each word by a multiply (the golden ratio's, as in Fibonacci
// hashing), and takes the top bits: enough to spread keys over 64 slots,
// for a fraction of a general string hash's cost on the success path.
// Keys that share a slot only miss the cache.
func cacheSlot(host string) uint64 {
	const golden = 0x9e3779b97f4a7c15
	h := cacheSeed ^ uint64(len(host))
	if len(host) < 8 {
		for i := 0; i < len(host); i++ {
			h = (h ^ uint64(host[i])) * golden
		}
	} else {
		for i := 0; i+8 < len(host); i += 8 {
			h = (h ^ word(host[i:])) * golden
			h ^= h >> 32
		}
		h = (h ^ word(host[len(host)-8:])) * golden
	}
	return h >> (64 - cacheBits)
}

// Get returns the entry for k, creating it with mk if absent.
func (t *Table[V]) Get(k Key, mk func(Key) V) V {
	slot := &t.cache[cacheSlot(k.Host)]
	if e := slot.Load(); e != nil && e.k == k {
		e.markUsed()
		return e.v
	}
	e, ok := t.m.Load(k)
	if !ok {
		e = t.insert(k, mk)
	}
	ent := e.(*entry[V])
	ent.markUsed()
	slot.Store(ent)
	if cur, ok := t.m.Load(k); !ok || cur != e {
		// An eviction dropped the entry between the load and the store: do
		// not leave it cached, or the host's later requests would keep using
		// an entry the table no longer holds.
		slot.CompareAndSwap(ent, nil)
	}
	return ent.v
}

// markUsed marks the entry used; a read first, so that a key asked for
// again and again does not write its entry's cache line each time.
func (e *entry[V]) markUsed() {
	if !e.used.Load() {
		e.used.Store(true)
	}
}

// insert adds the entry for k, made by mk, unless another caller has.
//
// How entries leave it: the table holds at most Max entries that could be
// dropped. An insertion into a full table evicts an idle entry (one that a
// fresh entry would replace without loss), the least recently used as the
// CLOCK algorithm approximates it: each Get marks its entry used (a new
// entry starts used), and the clock hand, moving over at most clockSteps
// entries, clears marks until it finds an idle entry not used since the hand
// last passed, or else takes the first idle one it passed. So an entry is
// dropped unused only after the hand has passed it once: a request whose
// attempt is in flight keeps its fresh entry while the table fills. When
// none of those entries is idle (each holds an open circuit or a request in
// flight) the table grows past max, and later insertions evict two entries
// each until it is back within bounds.
func (t *Table[V]) insert(k Key, mk func(Key) V) any {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.m.Load(k); ok {
		return e
	}
	max := t.Max
	if max <= 0 {
		max = defaultMaxKeys
	}
	var now time.Time
	for range 2 {
		if len(t.ring) < max || !t.evictLocked(&now) {
			break
		}
	}
	e := &entry[V]{k: k.clone()}
	// New, it counts as used: the request that inserts it has yet to use
	// it (its attempt may be in flight), and the next insertions, which
	// begin where this one evicted, must pass it over once.
	e.used.Store(true)
	e.v = mk(e.k)
	t.ring = append(t.ring, e)
	t.m.Store(e.k, e)
	return e
}

// evictLocked moves the clock hand over at most clockSteps entries and
// drops the first idle one it finds that was not used since the hand last
// passed, or else the first idle one it passed. It reports whether it
// dropped one. now is read once, when first needed.
func (t *Table[V]) evictLocked(now *time.Time) bool {
	fallback := -1
	for range min(clockSteps, len(t.ring)) {
		if t.hand >= len(t.ring) {
			t.hand = 0
		}
		e := t.ring[t.hand]
		used := e.used.Swap(false)
		if !used || fallback < 0 {
			if now.IsZero() {
				*now = time.Now()
			}
			if t.Idle(e.v, *now) {
				if !used {
					// The ring's last entry moves into the hand's place;
					// the hand steps past it, so that an entry moved is
					// not judged before the hand comes round again.
					t.dropLocked(t.hand)
					t.hand++
					return true
				}
				fallback = t.hand
			}
		}
		t.hand++
	}
	if fallback < 0 {
		return false
	}
	t.dropLocked(fallback)
	return true
}

// dropLocked removes the entry at ring index i: from the map first, then
// the cache, so that a get racing with this either finds it gone from the
// map or has its cached copy cleared (see get).
func (t *Table[V]) dropLocked(i int) {
	e := t.ring[i]
	t.m.Delete(e.k)
	last := len(t.ring) - 1
	t.ring[i], t.ring[last] = t.ring[last], nil
	t.ring = t.ring[:last]
	t.cache[cacheSlot(e.k.Host)].CompareAndSwap(e, nil)
}

// Peek returns the entry for k, or the zero V; it creates none.
func (t *Table[V]) Peek(k Key) V {
	if e, ok := t.m.Load(k); ok {
		return e.(*entry[V]).v
	}
	var zero V
	return zero
}

// Values returns every value the table holds.
func (t *Table[V]) Values() []V {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]V, len(t.ring))
	for i, e := range t.ring {
		out[i] = e.v
	}
	return out
}

// Len returns how many entries the table holds.
func (t *Table[V]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.ring)
}
