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
	scheme string
	host   string // host[:port], port omitted when it is the scheme's default
}

func (k hostKey) String() string { return k.scheme + "://" + k.host }

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

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// table is a per-host map whose reads take no lock, for per-host budgets
// and lanes. A small direct-mapped cache in front of the sync.Map answers
// the common case (a few hosts, each asked for again and again) with one
// string hash and one comparison; a miss falls through to the map and
// caches the entry, which allocates nothing because entries are made once.
//
// How entries leave it: when an insertion finds the table at its sweep
// threshold, it drops every idle entry (one that a fresh entry would
// replace without loss) and sets the next threshold to twice what is left,
// at least minSweep. A process that talks to 1,000,000 hosts over a day
// therefore holds the hosts that are failing or recently used, not every
// host it has seen, and pays for a sweep in proportion to its inserts.
type table[V any] struct {
	cache [cacheSlots]atomic.Pointer[entry[V]]
	m     sync.Map // hostKey -> *entry[V]
	mu    sync.Mutex
	size  int // entries; guarded by mu
	next  int // sweep when size reaches next; guarded by mu
	idle  func(V, time.Time) bool
}

// entry is one host's value with its key, so that the cache can check what
// it holds.
type entry[V any] struct {
	k hostKey
	v V
}

const (
	minSweep   = 1024
	cacheSlots = 64
)

// cacheSeed hashes hosts to cache slots; any seed will do.
var cacheSeed = maphash.MakeSeed()

// get returns the entry for k, creating it with mk if absent.
func (t *table[V]) get(k hostKey, mk func() V) V {
	slot := &t.cache[maphash.String(cacheSeed, k.host)%cacheSlots]
	if e := slot.Load(); e != nil && e.k == k {
		return e.v
	}
	e, ok := t.m.Load(k)
	if !ok {
		e = t.insert(k, mk)
	}
	ent := e.(*entry[V])
	slot.Store(ent)
	if cur, ok := t.m.Load(k); !ok || cur != e {
		// A sweep dropped the entry between the load and the store: do not
		// leave it cached, or the host's later requests would keep using
		// an entry the table no longer holds.
		slot.CompareAndSwap(ent, nil)
	}
	return ent.v
}

func (t *table[V]) insert(k hostKey, mk func() V) any {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.m.Load(k); ok {
		return e
	}
	if t.next == 0 {
		t.next = minSweep
	}
	if t.size >= t.next {
		t.sweepLocked(time.Now())
	}
	e := &entry[V]{k: k, v: mk()}
	t.m.Store(k, e)
	t.size++
	return e
}

// sweepLocked drops idle entries, and empties the cache so that it cannot
// hand out a dropped entry. A request that still holds a dropped entry
// finishes with it; what it records there is lost, which is harmless
// because the entry was idle (and a lane with a request sleeping on it is
// never idle).
//
// The map is swept before the cache is emptied. A concurrent get that
// caches an entry before the cache is emptied loses it then; one that
// caches it after finds the entry already gone from the map when it checks
// again, and takes it out of the cache itself.
func (t *table[V]) sweepLocked(now time.Time) {
	t.m.Range(func(k, e any) bool {
		if t.idle(e.(*entry[V]).v, now) {
			t.m.Delete(k)
			t.size--
		}
		return true
	})
	for i := range t.cache {
		t.cache[i].Store(nil)
	}
	t.next = max(2*t.size, minSweep)
}
