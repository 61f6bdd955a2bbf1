package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryhttp/retryhttp/internal/fleetlink"
	"github.com/retryhttp/retryhttp/internal/perkey"
)

// Store carries what processes learn about keys from one to the others:
// a shared store such as Redis (the module
// github.com/retryhttp/retryhttp/redisstate implements it on go-redis). A
// Fleet calls it from its own goroutines only, never on a request's path,
// so a slow or dead store slows no request. Implementations must be safe
// for concurrent use.
//
// Times travel as durations measured by the store's own clock when it
// receives or hands out a change (an open that ends in 7 s), never as
// instants compared between machines whose clocks differ.
type Store interface {
	// Announce records one change this process made and passes it to the
	// other processes' watchers. For an Open, the store fills in
	// Reporters: how many distinct instances announced Failing for the key
	// within their windows, this one included if it did.
	Announce(ctx context.Context, c Change) error
	// Watch calls apply for each change another process announces (it
	// need not pass on ChangeFailing, which only the store counts); and,
	// when it (re)connects and periodically, with every key's current
	// state (an Open or a Hold with its time left, naming the instance that
	// announced it), every live instance (an Alive) and every live Demand,
	// with its instance, so that a process
	// that started late or lost its connection catches up. It returns when
	// ctx ends, or with an error when it cannot go on; the Fleet then calls
	// it again.
	Watch(ctx context.Context, apply func(Change)) error
}

// ChangeKind says what a Change announces.
type ChangeKind int

// The kinds of change.
const (
	// ChangeAlive: the instance is alive; For is how long to count it.
	ChangeAlive ChangeKind = iota + 1
	// ChangeFailing: the instance saw the key fail; For is how long the
	// report counts (the breaker's failure window).
	ChangeFailing
	// ChangeOpen: the key's circuit opened for For; Reporters is how many
	// instances reported it failing.
	ChangeOpen
	// ChangeClose: the key's circuit closed Age ago.
	ChangeClose
	// ChangeHold: the key is held for For by a server's Retry-After.
	ChangeHold
	// ChangeDemand: the instance paces the key to the quota its server
	// advertises, and will for For; the instances that do divide it.
	ChangeDemand
)

// Change is one fact a process shares about a key, or about itself.
type Change struct {
	Kind      ChangeKind    // what the change announces
	Instance  string        // the announcing process
	Key       string        // the key, as hooks and errors report it; "" for ChangeAlive
	For       time.Duration // ChangeAlive, ChangeFailing, ChangeOpen, ChangeHold, ChangeDemand: how long from now
	Age       time.Duration // ChangeClose: how long ago
	Reporters int           // ChangeOpen: distinct instances that reported the key failing
}

// Config configures a Fleet. The zero value means every default, and so
// does a negative value in any field.
type Config struct {
	// Instance names this process to the others; "" means a random name.
	Instance string
	// Quorum is how many distinct instances must have reported a key
	// failing within the breaker's window before an open announced by
	// another instance is adopted here, so that one misbehaving instance
	// cannot open every other one's circuits. 0 means 2, or 1 while the
	// fleet has one or two members.
	Quorum int
	// Heartbeat is how often this process says it is alive; an instance
	// not heard from for three heartbeats is no longer counted. 0 means
	// 2 s; at most 1 h.
	Heartbeat time.Duration
	// Timeout bounds each call to the store. 0 means 1 s.
	Timeout time.Duration
	// Queue is how many announcements wait for the store; when it is full
	// the oldest is dropped (counted in Stats.Dropped). 0 means 1024; at
	// most 1,048,576.
	Queue int
}

// The most Config's Queue and Heartbeat can mean.
const (
	maxQueue     = 1 << 20
	maxHeartbeat = time.Hour
)

// Fleet shares, through a Store, what the retryhttp Breakers and Budgets of
// several processes learn: a key's circuit opening and closing, a key's
// hold, the size of the fleet, by which each process divides its budget's
// floor and cap, and which processes pace a key to the quota its server
// advertises, which divide it: each paces to its share. It does not share per-request counts, deposits
// and withdrawals, a policy's memory or a transport's Stats. Requests read
// only local memory: changes travel in the background, and a store that is
// slow, paused or down leaves each process behaving as it would alone (its
// fleet size decays back to 1 as heartbeats stop), except that it keeps
// pacing each key at its last share of the key's quota.
//
// Create one with New, attach it with retryhttp.WithFleet, and run it with
// Run for as long as the transports are used. It is safe for concurrent
// use.
type Fleet struct {
	store Store
	cfg   Config
	queue chan queued

	mu       sync.Mutex
	breakers []fleetlink.Breaker
	budgets  []fleetlink.Budget
	seen     map[string]time.Time // other instances: when each counts until, by the local clock
	// demand is which other instances pace which key to its quota, and
	// until when, by the local clock.
	demand map[string]map[string]time.Time

	mine      sync.Map                           // key -> *demandMark: this process paces the key to its quota
	shares    atomic.Pointer[map[string]float64] // key -> the part of its quota this process may spend; absent: all
	lastOK    atomic.Int64                       // when the store last took an announcement (see mono)
	lastHeard atomic.Int64                       // when the store last passed on a change, this process's own included (see mono)
	epoch     time.Time                          // what mono counts from
	frozen    bool                               // the others' demand is kept as it was: the store is down; guarded by mu

	size                         atomic.Int64
	announced, dropped, received atomic.Uint64
	adopted                      atomic.Uint64
}

// queued is a change waiting for the store, with when it was made.
type queued struct {
	c  Change
	at time.Time
}

// Stats counts what a Fleet did.
type Stats struct {
	Size      int    // instances counted alive, this one included
	Announced uint64 // changes the store accepted
	Dropped   uint64 // changes dropped: the queue was full, or the store failed
	Received  uint64 // changes received from other instances
	Adopted   uint64 // of those, changes applied to a local circuit or hold
}

// New returns a Fleet that shares through s, configured by c.
func New(s Store, c Config) *Fleet {
	if c.Instance == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.Instance = hex.EncodeToString(b[:])
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 2 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = time.Second
	}
	if c.Queue <= 0 {
		c.Queue = 1024
	}
	// A queue is allocated whole, and three heartbeats are how long an
	// instance counts: bound both to what can mean anything.
	c.Queue = min(c.Queue, maxQueue)
	c.Heartbeat = min(c.Heartbeat, maxHeartbeat)
	f := &Fleet{store: s, cfg: c, queue: make(chan queued, c.Queue), seen: map[string]time.Time{}, demand: map[string]map[string]time.Time{},
		epoch: time.Now()}
	f.size.Store(1)
	return f
}

// The root package's New attaches the breaker and budget of each transport
// given a fleet through fleetlink.Join, as it cannot call attach itself.
func init() {
	fleetlink.Join = func(f any, b fleetlink.Breaker, bu fleetlink.Budget) { f.(*Fleet).attach(b, bu) }
}

// attach makes f share b and bu; either may be nil. Each joins one fleet
// only: one that has joined a fleet already is left as it is.
func (f *Fleet) attach(b fleetlink.Breaker, bu fleetlink.Budget) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b != nil && b.Join(f.announceLink, f.share) {
		f.breakers = append(f.breakers, b)
	}
	if bu != nil && bu.Join() {
		f.budgets = append(f.budgets, bu)
		bu.Share(int(f.size.Load()))
	}
}

// Stats returns what the fleet has done so far.
func (f *Fleet) Stats() Stats {
	return Stats{Size: int(f.size.Load()), Announced: f.announced.Load(), Dropped: f.dropped.Load(),
		Received: f.received.Load(), Adopted: f.adopted.Load()}
}

// Run shares changes until ctx ends: it sends this process's changes and
// heartbeats to the store, and applies the others'. It returns when ctx
// ends and its goroutines have stopped.
func (f *Fleet) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { f.announceLoop(ctx) })
	wg.Go(func() { f.watchLoop(ctx) })
	wg.Go(func() { f.heartbeatLoop(ctx) })
	wg.Wait()
	return ctx.Err()
}

// announce queues c for the store without blocking: when the queue is full
// the oldest change is dropped.
func (f *Fleet) announce(c Change) {
	c.Instance = f.cfg.Instance
	q := queued{c: c, at: time.Now()}
	for {
		select {
		case f.queue <- q:
			return
		default:
		}
		select {
		case <-f.queue:
			f.dropped.Add(1)
		default:
		}
	}
}

// announceLink announces a change a breaker's request made.
func (f *Fleet) announceLink(c fleetlink.Change) {
	if c.Kind == fleetlink.Demand {
		f.demanded(c.Key, time.Now())
		return
	}
	f.announce(Change{Kind: ChangeKind(c.Kind), Key: c.Key, For: c.For, Age: c.Age, Reporters: c.Reporters})
}

// A fleet's processes divide a key's advertised quota between those that
// pace the key to it: each announces that it does, once a heartbeat while
// it does, and counts for demandBeats heartbeats after. The count outlasts
// a store that dies by more than the two heartbeats after which a process
// stops expiring the others' (see reshare), so that each goes on at its
// last share.
const demandBeats = 4

// demandMark is when this process began to pace a key to its quota, and
// when it last said so: durations since the fleet's epoch, on the
// monotonic clock, so that a step of the wall clock moves neither.
type demandMark struct{ since, last atomic.Int64 }

// mono returns now as a duration since the fleet's epoch, on the monotonic
// clock.
func (f *Fleet) mono(now time.Time) int64 { return int64(now.Sub(f.epoch)) }

// demanded notes that this process paces key to its quota, and tells the
// others at most once a heartbeat. A key newly paced has its share set at
// once: until the others have had a heartbeat to say whether they pace it
// too, every live member is taken to, so that processes started together
// do not each spend the whole of the first window.
func (f *Fleet) demanded(key string, now time.Time) {
	v, ok := f.mine.Load(key)
	if !ok {
		v, _ = f.mine.LoadOrStore(key, new(demandMark))
	}
	m := v.(*demandMark)
	last, at := m.last.Load(), f.mono(now)
	if last != 0 && at-last < int64(f.cfg.Heartbeat) && at >= last || !m.last.CompareAndSwap(last, at) {
		return
	}
	// A reshare that found the mark stale may have dropped it meanwhile.
	f.mine.Store(key, m)
	f.announce(Change{Kind: ChangeDemand, Key: key, For: demandBeats * f.cfg.Heartbeat})
	if last == 0 || at-last > int64(demandBeats*f.cfg.Heartbeat) {
		m.since.Store(at)
		f.reshare(now)
	}
}

// share returns the part of key's advertised quota this process may
// spend: one over the number of processes that pace the key to it. A key
// this process has just begun to pace, whose share a reshare has not set
// yet, gets the share of a newly paced key.
func (f *Fleet) share(key string) float64 {
	if m := f.shares.Load(); m != nil {
		if s, ok := (*m)[key]; ok {
			return s
		}
	}
	if v, ok := f.mine.Load(key); ok {
		if since := v.(*demandMark).since.Load(); since == 0 || f.mono(time.Now())-since < int64(f.cfg.Heartbeat) {
			return 1 / float64(max(f.size.Load(), 1))
		}
	}
	return 1
}

// reshare recomputes each key's share. The others' demand expires with
// its time, unless the store has, for two heartbeats, taken no
// announcement of this process's or passed on nothing: a store that is
// down says nothing of who stopped, and each process goes on at its last
// share. When the store is back, the demand kept gets demandBeats
// heartbeats more, for its processes to say it again.
func (f *Fleet) reshare(now time.Time) {
	hb := f.cfg.Heartbeat
	f.mu.Lock()
	defer f.mu.Unlock()
	at := f.mono(now)
	frozen := at-f.lastOK.Load() > int64(2*hb) || at-f.lastHeard.Load() > int64(2*hb)
	size := int(f.size.Load())
	switch {
	case frozen:
		f.frozen = true
	case f.frozen:
		f.frozen = false
		for _, insts := range f.demand {
			for inst, until := range insts {
				insts[inst] = later(until, now.Add(demandBeats*hb))
			}
		}
	default:
		for key, insts := range f.demand {
			for inst, until := range insts {
				if !now.Before(until) {
					delete(insts, inst)
				}
			}
			if len(insts) == 0 {
				delete(f.demand, key)
			}
		}
	}
	shares := map[string]float64{}
	f.mine.Range(func(k, v any) bool {
		key, m := k.(string), v.(*demandMark)
		if last := m.last.Load(); at-last > int64(demandBeats*hb) {
			f.mine.CompareAndDelete(key, m) // no longer paced here
			return true
		}
		n := 1 + len(f.demand[key])
		if at-m.since.Load() < int64(hb) {
			n = max(n, size)
		}
		if n > 1 {
			shares[key] = 1 / float64(n)
		}
		return true
	})
	f.shares.Store(&shares)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (f *Fleet) announceLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case q := <-f.queue:
			// A change that waited for a slow store has aged: it says what
			// is left of its time, and one whose time is over is dropped.
			c, waited := q.c, time.Since(q.at)
			c.Age += waited
			if c.For > 0 {
				if c.For -= waited; c.For <= 0 {
					f.dropped.Add(1)
					continue
				}
			}
			cctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
			if err := f.store.Announce(cctx, c); err != nil {
				f.dropped.Add(1)
			} else {
				f.announced.Add(1)
				f.lastOK.Store(f.mono(time.Now()))
			}
			cancel()
		}
	}
}

// The waits between calls to a store's Watch that failed: full jitter,
// from 100 ms doubling up to 5 s.
const (
	watchBase = 100 * time.Millisecond
	watchCap  = 5 * time.Second
)

func (f *Fleet) watchLoop(ctx context.Context) {
	for n := 1; ctx.Err() == nil; n++ {
		start := time.Now()
		_ = f.store.Watch(ctx, f.apply)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > watchCap {
			n = 1 // it watched for a while: this is a new failure
		}
		// The store failed: try again, spread, as any retry should be.
		if perkey.Sleep(ctx, watchDelay(n)) != nil {
			return
		}
	}
}

// watchDelay returns the wait before the nth call to Watch after a
// failure: drawn uniformly from [0, min(watchCap, watchBase·2^(n−1))), as
// retryhttp.FullJitter draws a retry's, so that processes that lost the
// store together do not come back together.
func watchDelay(n int) time.Duration {
	d := watchBase
	for i := 1; i < n && d < watchCap; i++ {
		d = min(2*d, watchCap)
	}
	return perkey.Uniform(0, d)
}

func (f *Fleet) heartbeatLoop(ctx context.Context) {
	tick := time.NewTicker(f.cfg.Heartbeat)
	defer tick.Stop()
	for {
		f.announce(Change{Kind: ChangeAlive, For: 3 * f.cfg.Heartbeat})
		now := time.Now()
		f.recount(now)
		f.reshare(now)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// recount sets the fleet's size from the instances heard from lately, and
// shares each budget's floor and cap out by it.
func (f *Fleet) recount(now time.Time) {
	f.mu.Lock()
	n := 1
	for id, until := range f.seen {
		if now.Before(until) {
			n++
		} else {
			delete(f.seen, id)
		}
	}
	changed := f.size.Swap(int64(n)) != int64(n)
	budgets := f.budgets
	f.mu.Unlock()
	if changed {
		for _, b := range budgets {
			b.Share(n)
		}
	}
}

// quorum returns how many reporters an adopted open needs.
func (f *Fleet) quorum() int {
	if f.cfg.Quorum > 0 {
		return f.cfg.Quorum
	}
	if f.size.Load() <= 2 {
		return 1
	}
	return 2
}

// apply applies a change from another instance.
func (f *Fleet) apply(c Change) {
	f.lastHeard.Store(f.mono(time.Now()))
	if c.Instance == f.cfg.Instance {
		return
	}
	f.received.Add(1)
	now := time.Now()
	switch c.Kind {
	case ChangeAlive:
		f.mu.Lock()
		_, known := f.seen[c.Instance]
		f.seen[c.Instance] = now.Add(c.For)
		f.mu.Unlock()
		if !known {
			f.recount(now)
			f.reshare(now)
		}
		return
	case ChangeDemand:
		f.mu.Lock()
		insts := f.demand[c.Key]
		if insts == nil {
			insts = map[string]time.Time{}
			f.demand[c.Key] = insts
		}
		_, known := insts[c.Instance]
		insts[c.Instance] = now.Add(c.For)
		f.mu.Unlock()
		if !known {
			f.reshare(now)
		}
		return
	}
	quorum := c.Reporters >= f.quorum()
	f.mu.Lock()
	breakers := f.breakers
	f.mu.Unlock()
	lc := fleetlink.Change{Kind: fleetlink.Kind(c.Kind), Key: c.Key, For: c.For, Age: c.Age, Reporters: c.Reporters}
	for _, b := range breakers {
		if b.Adopt(lc, quorum, now) {
			f.adopted.Add(1)
		}
	}
}
