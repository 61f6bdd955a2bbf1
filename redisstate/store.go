// Package redisstate implements the Store of package
// github.com/retryhttp/retryhttp/fleet on Redis, through
// github.com/redis/go-redis/v9, so that the processes of a fleet share what
// their circuit breakers learn: a key's circuit opening and closing, a
// key's hold, failure reports and heartbeats.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379"})
//	f := fleet.New(redisstate.New(rdb, redisstate.Options{Prefix: "retryhttp:prod:"}), fleet.Config{})
//	go f.Run(ctx)
//	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithFleet(f))}
//
// Any go-redis client will do: a plain, Sentinel (failover), Cluster or
// TLS one; the store does not own it and never closes it.
//
// # Time
//
// Every instant is Redis's: a Lua script reads Redis's TIME, turns each
// announced duration into an expiry in Redis time, and turns expiries back
// into the time left when it hands them out. The clocks of the processes
// and of the server are never compared. A change pushed to a watcher
// carries the time left when Redis handled it, not shortened by the
// (one-way, usually sub-millisecond) delivery; a snapshot's times are
// shortened by half the round trip of the read that fetched them. An
// announcement that reaches Redis late (a paused server, a long queue)
// counts its duration from when Redis runs it.
//
// # What is stored
//
// Under Options.Prefix, in one Redis Cluster hash slot (the hash tag
// {fleet} follows the prefix, as in "retryhttp:{fleet}:open"): the sorted
// sets open, hold and alive, a sorted set failing:<key> and a string
// openby:<key> per failing key, and the pub/sub channel <prefix>changes
// (not in a slot: a Cluster carries it to every node). Each entry carries
// its own expiry in Redis time and each Redis key expires with its latest
// entry, so nothing stays once its times have passed. Keys (host names, or
// what retryhttp.WithKey computes) and instance names are stored, and
// published, in clear.
package redisstate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryhttp/retryhttp/fleet"
)

// Defaults of Options.
const (
	// DefaultPrefix starts every Redis key and the channel the store uses.
	DefaultPrefix = "retryhttp:"
	// DefaultSnapshotPeriod is how often Watch hands over a full snapshot
	// besides at each (re)subscription.
	DefaultSnapshotPeriod = 10 * time.Second
	// DefaultTimeout bounds each snapshot read that Watch makes.
	DefaultTimeout = 2 * time.Second
)

// maxFor bounds every duration the store records, so that no entry stays
// for ever whatever a caller announces.
const maxFor = 24 * time.Hour

// Options configures a Store. The zero value means every default.
type Options struct {
	// Prefix starts the name of every Redis key and of the pub/sub channel
	// the store uses. Stores with the same prefix on the same Redis share
	// state: give each environment its own, such as "retryhttp:prod:" and
	// "retryhttp:staging:", to keep them apart. On a Redis Cluster every
	// key of a store lives in one slot, that of the hash tag {fleet} that
	// follows the prefix, unless the prefix holds a hash tag of its own
	// ("retryhttp:{prod}:"), which then comes first. "" means
	// DefaultPrefix ("retryhttp:").
	Prefix string
	// SnapshotPeriod is how often Watch hands over every key's state and
	// every live instance, besides at each (re)subscription, so that a
	// lost push is made good. 0 means DefaultSnapshotPeriod (10 s); a
	// negative value means only at (re)subscription.
	SnapshotPeriod time.Duration
	// Timeout bounds each snapshot read that Watch makes; Announce is
	// bounded by its context alone. 0 or less means DefaultTimeout (2 s).
	Timeout time.Duration
}

// Store is a fleet.Store on Redis. Create one with New; it is safe for
// concurrent use.
type Store struct {
	rdb     redis.UniversalClient
	prefix  string // Options.Prefix followed by the hash tag
	channel string
	period  time.Duration
	timeout time.Duration

	open, hold, alive, demand string // the sorted sets' names

	// onSnapshot, when set (by tests), is called after each snapshot
	// Watch delivers.
	onSnapshot func()
}

var _ fleet.Store = (*Store)(nil)

// New returns a Store that keeps its state in the Redis that client reaches,
// configured by opts. The client must not be nil; it stays the caller's:
// New does not change it, and the store never closes it.
//
// New panics if opts.Prefix holds an empty hash tag ("{}" as its first
// braces), which would scatter the store's keys over a Redis Cluster's
// slots.
//
// Calls honour their context even when the client has
// ContextTimeoutEnabled unset (go-redis then bounds a command by its
// ReadTimeout only): a call whose context ends returns at once, and the
// command it left behind ends within the client's ReadTimeout, holding one
// of its pool's connections until then.
func New(client redis.UniversalClient, opts Options) *Store {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.SnapshotPeriod == 0 {
		opts.SnapshotPeriod = DefaultSnapshotPeriod
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if i := strings.IndexByte(opts.Prefix, '{'); i >= 0 && strings.HasPrefix(opts.Prefix[i:], "{}") {
		panic(fmt.Sprintf("redisstate: New: Options.Prefix %q holds an empty hash tag {}; drop it, or put a name between the braces", opts.Prefix))
	}
	// The hash tag puts every key in one Redis Cluster slot, as a script's
	// keys must be: whatever braces the prefix holds, the first {...} of
	// every key is the same.
	p := opts.Prefix + "{fleet}:"
	return &Store{
		rdb:     client,
		prefix:  p,
		channel: opts.Prefix + "changes",
		period:  opts.SnapshotPeriod,
		timeout: opts.Timeout,
		open:    p + "open",
		hold:    p + "hold",
		alive:   p + "alive",
		demand:  p + "demand",
	}
}

// Announce records c in Redis and publishes it to the watchers, in one
// script run by Redis's clock. For an Open the announcer counts as a
// reporter, and the Change published carries how many distinct instances
// have a failure report for the key alive. An open or a hold is extended,
// never shortened: the later of its expiries is kept, and the Change
// published carries the time left of the one kept. Durations are counted
// in whole milliseconds, rounded up, and bounded to 24 h so that nothing
// stays for ever. It returns when the script has run, or when ctx ends.
func (s *Store) Announce(ctx context.Context, c fleet.Change) error {
	if c.Kind < fleet.ChangeAlive || c.Kind > fleet.ChangeDemand {
		return fmt.Errorf("redisstate: Announce: unknown kind %d", c.Kind)
	}
	keys := []string{s.open, s.hold, s.alive, s.prefix + "failing:" + c.Key, s.prefix + "openby:" + c.Key, s.demand}
	args := []any{int(c.Kind), c.Instance, c.Key, millis(c.For), millis(c.Age), s.channel}
	return call(ctx, func(ctx context.Context) error {
		return announceScript.Run(ctx, s.rdb, keys, args...).Err()
	})
}

// Watch subscribes to the store's channel and calls apply with each change
// published, and with a full snapshot (every open and hold with its time
// left, every live instance as a ChangeAlive, every live ChangeDemand) each time the subscription
// is confirmed, at first and after go-redis has reconnected and
// resubscribed, and every Options.SnapshotPeriod. It calls apply from its
// own goroutine, one change at a time. It returns nil when ctx ends, once
// go-redis's goroutines for the subscription have stopped (a snapshot
// read that ctx cut short ends within the client's ReadTimeout).
//
// A snapshot's opens and holds have an empty Instance when Redis does not
// know who announced them; an open's Instance is the instance whose
// expiry the store kept.
func (s *Store) Watch(ctx context.Context, apply func(fleet.Change)) error {
	ps := s.rdb.Subscribe(ctx, s.channel)
	msgs := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	defer func() {
		_ = ps.Close()
		// go-redis's receiving goroutine ends when it finds the PubSub
		// closed, and may first wait to hand over a message: take them.
		for range msgs {
		}
	}()
	var tick <-chan time.Time
	if s.period > 0 {
		t := time.NewTicker(s.period)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-msgs:
			if !ok {
				return errors.New("redisstate: Watch: the subscription was closed")
			}
			switch m := m.(type) {
			case *redis.Subscription:
				// A confirmation: the first subscription, or go-redis's
				// own after a reconnection; changes may have been missed.
				if m.Kind == "subscribe" {
					s.snapshot(ctx, apply)
				}
			case *redis.Message:
				if c, ok := decode(m.Payload); ok {
					apply(c)
				}
			}
		case <-tick:
			s.snapshot(ctx, apply)
		}
	}
}

// snapshot reads every key's state and hands it to apply. A read that fails
// is skipped: the next subscription or period tries again.
func (s *Store) snapshot(ctx context.Context, apply func(fleet.Change)) {
	cs, err := s.readSnapshot(ctx)
	if err != nil {
		return
	}
	for _, c := range cs {
		apply(c)
	}
	if s.onSnapshot != nil {
		s.onSnapshot()
	}
}

// readSnapshot runs the snapshot script, bounded by the store's timeout.
// The times left are as Redis saw them at some instant of the round trip:
// they are shortened by half of it.
func (s *Store) readSnapshot(ctx context.Context) ([]fleet.Change, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var reply []any
	start := time.Now()
	err := call(ctx, func(ctx context.Context) error {
		var err error
		reply, err = snapshotScript.Run(ctx, s.rdb, []string{s.open, s.hold, s.alive, s.demand},
			s.prefix+"failing:", s.prefix+"openby:").Slice()
		return err
	})
	if err != nil {
		return nil, err
	}
	half := time.Since(start) / 2
	var out []fleet.Change
	for i := 0; i+5 <= len(reply); i += 5 {
		kind, _ := reply[i].(int64)
		inst, _ := reply[i+1].(string)
		key, _ := reply[i+2].(string)
		left, _ := reply[i+3].(int64)
		reporters, _ := reply[i+4].(int64)
		c := fleet.Change{Kind: fleet.ChangeKind(kind), Instance: inst, Key: key,
			For: max(time.Duration(left)*time.Millisecond-half, 0), Reporters: int(reporters)}
		if c.For > 0 && (c.Kind == fleet.ChangeOpen || c.Kind == fleet.ChangeHold || c.Kind == fleet.ChangeAlive || c.Kind == fleet.ChangeDemand) {
			out = append(out, c)
		}
	}
	return out, nil
}

// call runs f and returns its error, or ctx's as soon as ctx ends, whether
// or not the client honours ctx itself.
func call(ctx context.Context, f func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// millis returns d in whole milliseconds, rounded up so that a positive
// duration stays positive, within [0, maxFor].
func millis(d time.Duration) int64 {
	d = min(max(d, 0), maxFor)
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// decode parses a message that announceScript published:
// "1 <kind> <left ms> <age ms> <reporters> <len(instance)> <instance><key>".
// It reports false for anything else.
func decode(p string) (fleet.Change, bool) {
	var n [6]int64
	for i := range n {
		f, rest, ok := strings.Cut(p, " ")
		if !ok {
			return fleet.Change{}, false
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil || v < 0 || v > math.MaxInt64/int64(time.Millisecond) {
			return fleet.Change{}, false
		}
		n[i], p = v, rest
	}
	if n[0] != 1 || n[1] < int64(fleet.ChangeAlive) || n[1] > int64(fleet.ChangeDemand) || n[5] > int64(len(p)) {
		return fleet.Change{}, false
	}
	return fleet.Change{
		Kind:      fleet.ChangeKind(n[1]),
		For:       time.Duration(n[2]) * time.Millisecond,
		Age:       time.Duration(n[3]) * time.Millisecond,
		Reporters: int(n[4]),
		Instance:  p[:n[5]],
		Key:       p[n[5]:],
	}, true
}
