package retryhttp

import (
	"hash/maphash"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// hostKey names a host as circuits and per-host budgets see it: scheme,
// host and port, with the scheme's default port left out and the host in
// lower case, so that http://Example.com and http://example.com:80 are one
// host. It is small and comparable, and building it allocates nothing for a
// URL already in that form.
type hostKey struct {
	scheme string // "" for a key from WithKey, which host holds whole
	host   string // host[:port], port omitted when it is the scheme's default
}

// String returns the key as hooks, errors and snapshots report it:
// scheme://host[:port], or a key from WithKey as it is.
func (k hostKey) String() string {
	if k.scheme == "" {
		return k.host
	}
	return k.scheme + "://" + k.host
}

// keyOf returns the hostKey of u.
func keyOf(u *url.URL) hostKey {
	if u == nil {
		return hostKey{}
	}
	h := u.Host
	switch {
	case u.Scheme == "http" && strings.HasSuffix(h, ":80"):
		h = h[:len(h)-len(":80")]
	case u.Scheme == "https" && strings.HasSuffix(h, ":443"):
		h = h[:len(h)-len(":443")]
	}
	if hasUpper(h) {
		h = strings.ToLower(h)
	}
	return hostKey{scheme: u.Scheme, host: h}
}

// hasUpper reports whether s holds a byte in 'A'..'Z'. It looks at eight
// bytes at a time: every request's key is computed from its host, so this
// is on the success path.
func hasUpper(s string) bool {
	if len(s) < 8 {
		for i := 0; i < len(s); i++ {
			if 'A' <= s[i] && s[i] <= 'Z' {
				return true
			}
		}
		return false
	}
	for i := 0; i+8 < len(s); i += 8 {
		if upperIn(word(s[i:])) {
			return true
		}
	}
	return upperIn(word(s[len(s)-8:])) // the last eight, overlapping or not
}

// word returns the first eight bytes of s as one little-endian word.
func word(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// upperIn reports whether one of x's bytes is in 'A'..'Z': the test for a
// byte strictly between two values from Sean Eron Anderson's "Bit
// Twiddling Hacks" (https://graphics.stanford.edu/~seander/bithacks.html),
// exact for any byte, with 'A'-1 and 'Z'+1 as the bounds.
func upperIn(x uint64) bool {
	const (
		ones  = 0x0101010101010101
		highs = ones * 0x80
		low7  = ones * 0x7f
		lo    = 'A' - 1
		hi    = 'Z' + 1
	)
	return (ones*(127+hi)-(x&low7))&^x&((x&low7)+ones*(127-lo))&highs != 0
}

// clone returns k with its own copy of its bytes: a key kept in a table
// must not pin the caller's URL string, query secrets included.
func (k hostKey) clone() hostKey {
	return hostKey{scheme: strings.Clone(k.scheme), host: strings.Clone(k.host)}
}

// defaultMaxHosts is how many hosts a Breaker or a per-host Budget keeps in
// memory at once by default. A lane costs a few hundred bytes, so 65,536
// hosts stay within about 30 MB, while a dispatcher with tens of thousands of
// active tenants keeps every one that matters.
const defaultMaxHosts = 1 << 16

// clockSteps bounds the entries one insertion looks at to find one to
// evict, so that no request waits on a pass over the whole table.
const clockSteps = 32

// table is a per-host map whose reads take no lock, for per-host budgets
// and lanes. A small direct-mapped cache in front of the sync.Map answers
// the common case (a few hosts, each asked for again and again) with one
// string hash and one comparison; a miss falls through to the map and
// caches the entry, which allocates nothing because entries are made once.
//
// How entries leave it: the table holds at most max entries that could be
// dropped. An insertion into a full table evicts an idle entry (one that a
// fresh entry would replace without loss), the least recently used as the
// CLOCK algorithm approximates it: each get marks its entry used (a new
// entry starts used), and the clock hand, moving over at most clockSteps
// entries, clears marks until it finds an idle entry not used since the hand
// last passed, or else takes the first idle one it passed. So an entry is
// dropped unused only after the hand has passed it once: a request whose
// attempt is in flight keeps its fresh entry while the table fills. When
// none of those entries is idle (each holds an open circuit or a request in
// flight) the table grows past max, and later insertions evict two entries
// each until it is back within bounds.
type table[V any] struct {
	cache [cacheSlots]atomic.Pointer[entry[V]]
	m     sync.Map // hostKey -> *entry[V]
	idle  func(V, time.Time) bool
	max   int // entries held before eviction; 0 means defaultMaxHosts (65,536)

	mu   sync.Mutex
	ring []*entry[V] // every entry, in the order the clock hand visits them; guarded by mu
	hand int         // the next entry the hand visits; guarded by mu
}

// entry is one host's value with its key, so that the cache can check what
// it holds.
type entry[V any] struct {
	k    hostKey
	v    V
	used atomic.Bool // got since the clock hand last passed
}

const (
	cacheBits  = 6
	cacheSlots = 1 << cacheBits
)

// cacheSeed varies the slots hosts take from one process to the next.
var cacheSeed = maphash.Comparable(maphash.MakeSeed(), 0) | 1

// cacheSlot returns the cache slot of host. It mixes eight bytes at a time,
// each word by a multiply (the golden ratio's, as in Fibonacci hashing),
// and takes the top bits: enough to spread hosts over 64 slots, for a
// fraction of a general string hash's cost on the success path. Hosts that
// share a slot only miss the cache.
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

// get returns the entry for k, creating it with mk if absent.
func (t *table[V]) get(k hostKey, mk func(hostKey) V) V {
	slot := &t.cache[cacheSlot(k.host)]
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

// markUsed marks the entry used; a read first, so that a host asked for
// again and again does not write its entry's cache line each time.
func (e *entry[V]) markUsed() {
	if !e.used.Load() {
		e.used.Store(true)
	}
}

func (t *table[V]) insert(k hostKey, mk func(hostKey) V) any {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.m.Load(k); ok {
		return e
	}
	max := t.max
	if max <= 0 {
		max = defaultMaxHosts
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
func (t *table[V]) evictLocked(now *time.Time) bool {
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
			if t.idle(e.v, *now) {
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
func (t *table[V]) dropLocked(i int) {
	e := t.ring[i]
	t.m.Delete(e.k)
	last := len(t.ring) - 1
	t.ring[i], t.ring[last] = t.ring[last], nil
	t.ring = t.ring[:last]
	t.cache[cacheSlot(e.k.host)].CompareAndSwap(e, nil)
}

// peek returns the entry for k, or the zero V; it creates none.
func (t *table[V]) peek(k hostKey) V {
	if e, ok := t.m.Load(k); ok {
		return e.(*entry[V]).v
	}
	var zero V
	return zero
}

// values returns every value the table holds.
func (t *table[V]) values() []V {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]V, len(t.ring))
	for i, e := range t.ring {
		out[i] = e.v
	}
	return out
}

// len returns how many entries the table holds.
func (t *table[V]) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.ring)
}
