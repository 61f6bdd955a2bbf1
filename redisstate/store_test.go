package redisstate

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/retryhttp/retryhttp/fleet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(int(p*float64(len(s))), len(s)-1)]
}

// A change reaches seven other watchers, each on its own client, with a
// p99 under 50 ms over 1,000 changes.
func TestPushLatency(t *testing.T) {
	srv := startRedis(t)
	p := prefix(t)
	sender := New(srv.client(t), Options{Prefix: p})
	const watchers, n = 7, 1000
	kinds := []fleet.ChangeKind{fleet.ChangeFailing, fleet.ChangeOpen, fleet.ChangeClose, fleet.ChangeHold}

	start := time.Now()
	var sent [n]atomic.Int64                      // since start, when Announce was called
	arrived := make([][n]time.Duration, watchers) // since start; each written by its watcher only
	var got atomic.Int64
	all := make(chan struct{})
	var ready sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	for w := range watchers {
		s := New(srv.client(t), Options{Prefix: p})
		var once sync.Once
		ready.Add(1)
		s.onSnapshot = func() { once.Do(ready.Done) }
		running.Go(func() {
			_ = s.Watch(ctx, func(c fleet.Change) {
				i, err := strconv.Atoi(strings.TrimPrefix(c.Key, "lat-"))
				if c.Instance != "sender" || err != nil || i < 0 || i >= n || arrived[w][i] != 0 {
					return
				}
				if c.Kind != kinds[i%len(kinds)] {
					t.Errorf("change %d: kind %d, want %d", i, c.Kind, kinds[i%len(kinds)])
				}
				arrived[w][i] = time.Since(start)
				if got.Add(1) == watchers*n {
					close(all)
				}
			})
		})
	}
	ready.Wait()

	start = time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Millisecond)))
		sent[i].Store(int64(time.Since(start)))
		c := fleet.Change{Kind: kinds[i%len(kinds)], Instance: "sender", Key: fmt.Sprint("lat-", i), For: 2 * time.Second}
		require.NoError(t, sender.Announce(bg(t), c))
	}
	select {
	case <-all:
	case <-time.After(10 * time.Second):
	}
	cancel()
	running.Wait()
	require.Equal(t, int64(watchers*n), got.Load(), "changes delivered")

	var each, slowest []time.Duration // per delivery; per change, to the last of the watchers
	for i := range n {
		var last time.Duration
		for w := range watchers {
			d := arrived[w][i] - time.Duration(sent[i].Load())
			each = append(each, d)
			last = max(last, d)
		}
		slowest = append(slowest, last)
	}
	t.Logf("announce to watcher, %d changes x %d watchers: per delivery p50 %v p99 %v; to all %d: p50 %v p99 %v max %v",
		n, watchers, percentile(each, 0.5), percentile(each, 0.99), watchers,
		percentile(slowest, 0.5), percentile(slowest, 0.99), percentile(slowest, 1))
	assert.Less(t, percentile(slowest, 0.99), 50*time.Millisecond, "p99 until all watchers have a change")
}

// A watcher that starts late gets the open's remaining time, by the
// store's clock, within ±50 ms.
func TestLateStarterSnapshot(t *testing.T) {
	srv := startRedis(t)
	p := prefix(t)
	a := New(srv.client(t), Options{Prefix: p})
	t0 := time.Now()
	require.NoError(t, a.Announce(bg(t), fleet.Change{Kind: fleet.ChangeOpen, Instance: "a", Key: "https://api.example.com", For: 3 * time.Second}))
	t1 := time.Now()
	timer := time.NewTimer(time.Second)
	<-timer.C

	w := startWatcher(t, New(srv.client(t), Options{Prefix: p}))
	r, ok := w.waitFor(2*time.Second, func(c fleet.Change) bool {
		return c.Kind == fleet.ChangeOpen && c.Key == "https://api.example.com"
	})
	require.True(t, ok, "the late starter got the open")
	// Redis ran the script between t0 and t1: the open ends between
	// t0+3s and t1+3s by the local clock.
	earliest, latest := 3*time.Second-r.at.Sub(t0), 3*time.Second-r.at.Sub(t1)
	t.Logf("waited %v; the snapshot says %v left; by the local clock %v..%v", r.at.Sub(t0).Round(time.Millisecond),
		r.c.For, earliest.Round(time.Millisecond), latest.Round(time.Millisecond))
	assert.GreaterOrEqual(t, r.c.For, earliest-50*time.Millisecond)
	assert.LessOrEqual(t, r.c.For, latest+50*time.Millisecond)
	assert.InDelta(t, float64(2*time.Second), float64(r.c.For), float64(50*time.Millisecond+r.at.Sub(t0)-time.Second))
	assert.Equal(t, 1, r.c.Reporters, "the announcer is a reporter")
	assert.Equal(t, "a", r.c.Instance, "the snapshot names the announcer")
}

// Entries expire by the store's clock: an open for 200 ms is gone from a
// snapshot after it, and so are the Redis keys.
func TestEntriesExpire(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.client(t)
	p := prefix(t)
	s := New(rdb, Options{Prefix: p})
	const key = "https://brief.example.com"
	for _, c := range []fleet.Change{
		{Kind: fleet.ChangeAlive, Instance: "a", For: 200 * time.Millisecond},
		{Kind: fleet.ChangeFailing, Instance: "b", Key: key, For: 200 * time.Millisecond},
		{Kind: fleet.ChangeOpen, Instance: "a", Key: key, For: 200 * time.Millisecond},
		{Kind: fleet.ChangeHold, Instance: "a", Key: key, For: 200 * time.Millisecond},
	} {
		require.NoError(t, s.Announce(bg(t), c))
	}
	names := []string{s.open, s.hold, s.alive, s.prefix + "failing:" + key, s.prefix + "openby:" + key}
	for _, name := range names {
		ttl, err := rdb.PTTL(bg(t), name).Result()
		require.NoError(t, err)
		assert.True(t, ttl > 0 && ttl <= 200*time.Millisecond, "%s: PTTL %v", name, ttl)
	}
	cs, err := s.readSnapshot(bg(t))
	require.NoError(t, err)
	assert.Len(t, cs, 3, "open, hold and alive before their time: %v", cs)

	timer := time.NewTimer(300 * time.Millisecond)
	<-timer.C
	cs, err = s.readSnapshot(bg(t))
	require.NoError(t, err)
	assert.Empty(t, cs, "snapshot after 300 ms")
	for _, name := range names {
		n, err := rdb.Exists(bg(t), name).Result()
		require.NoError(t, err)
		ttl, err := rdb.PTTL(bg(t), name).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "%s exists", name)
		assert.Equal(t, time.Duration(-2), ttl, "%s: PTTL", name)
	}
}

// An open or a hold is extended, never shortened; reporters are distinct
// instances whose reports are alive.
func TestExtendAndReporters(t *testing.T) {
	srv := startRedis(t)
	p := prefix(t)
	s := New(srv.client(t), Options{Prefix: p})
	w := startWatcher(t, New(srv.client(t), Options{Prefix: p, SnapshotPeriod: -1}))
	require.True(t, w.waitSnapshot(t, 2*time.Second), "first snapshot")
	const key = "https://api.example.com"
	announce := func(c fleet.Change) fleet.Change {
		t.Helper()
		require.NoError(t, s.Announce(bg(t), c))
		r, ok := w.waitFor(2*time.Second, func(got fleet.Change) bool {
			return got.Kind == c.Kind && got.Instance == c.Instance && got.Key == c.Key
		})
		require.True(t, ok, "pushed: %+v", c)
		w.mu.Lock()
		w.changes = nil // each wait sees only what follows
		w.mu.Unlock()
		return r.c
	}
	announce(fleet.Change{Kind: fleet.ChangeFailing, Instance: "a", Key: key, For: 4 * time.Second})
	announce(fleet.Change{Kind: fleet.ChangeFailing, Instance: "a", Key: key, For: 4 * time.Second})
	announce(fleet.Change{Kind: fleet.ChangeFailing, Instance: "b", Key: key, For: 50 * time.Millisecond})
	announce(fleet.Change{Kind: fleet.ChangeFailing, Instance: "x", Key: "https://other.example.com", For: 4 * time.Second})
	timer := time.NewTimer(100 * time.Millisecond) // b's report runs out
	<-timer.C
	c := announce(fleet.Change{Kind: fleet.ChangeOpen, Instance: "c", Key: key, For: 5 * time.Second})
	assert.Equal(t, 2, c.Reporters, "a and c, not b (run out) nor x (another key)")
	assert.InDelta(t, float64(5*time.Second), float64(c.For), float64(50*time.Millisecond))

	c = announce(fleet.Change{Kind: fleet.ChangeOpen, Instance: "d", Key: key, For: time.Second})
	assert.Equal(t, 3, c.Reporters)
	assert.InDelta(t, float64(5*time.Second), float64(c.For), float64(100*time.Millisecond), "a shorter open keeps the later expiry")

	c = announce(fleet.Change{Kind: fleet.ChangeHold, Instance: "a", Key: key, For: 8 * time.Second})
	assert.InDelta(t, float64(8*time.Second), float64(c.For), float64(50*time.Millisecond))
	c = announce(fleet.Change{Kind: fleet.ChangeHold, Instance: "b", Key: key, For: 2 * time.Second})
	assert.InDelta(t, float64(8*time.Second), float64(c.For), float64(100*time.Millisecond), "a shorter hold keeps the later expiry")

	cs, err := s.readSnapshot(bg(t))
	require.NoError(t, err)
	require.Len(t, cs, 2, "%+v", cs)
	assert.Equal(t, fleet.Change{Kind: fleet.ChangeOpen, Instance: "c", Key: key, For: cs[0].For, Reporters: 3}, cs[0],
		"the open named after the instance whose expiry is kept")
	assert.Equal(t, fleet.ChangeHold, cs[1].Kind)

	c = announce(fleet.Change{Kind: fleet.ChangeClose, Instance: "b", Key: key, Age: 30 * time.Millisecond})
	assert.Equal(t, 30*time.Millisecond, c.Age)
	cs, err = s.readSnapshot(bg(t))
	require.NoError(t, err)
	require.Len(t, cs, 1, "the close ends the open, not the hold: %+v", cs)
	assert.Equal(t, fleet.ChangeHold, cs[0].Kind)
}

// Keys travel byte for byte, whatever they hold.
func TestOddKeys(t *testing.T) {
	srv := startRedis(t)
	p := prefix(t)
	s := New(srv.client(t), Options{Prefix: p})
	w := startWatcher(t, New(srv.client(t), Options{Prefix: p}))
	require.True(t, w.waitSnapshot(t, 2*time.Second), "first snapshot")
	keys := []string{"", " ", "a b c", "1 2 3 4 5 6", "{fleet}", "x\x00y", "\xff\xfe", "héllo wörld", "tenant:42\n"}
	for i, k := range keys {
		inst := fmt.Sprintf("in st %d", i)
		require.NoError(t, s.Announce(bg(t), fleet.Change{Kind: fleet.ChangeHold, Instance: inst, Key: k, For: time.Minute}))
		_, ok := w.waitFor(2*time.Second, func(c fleet.Change) bool { return c.Instance == inst && c.Key == k })
		assert.True(t, ok, "key %q", k)
	}
	cs, err := s.readSnapshot(bg(t))
	require.NoError(t, err)
	var got []string
	for _, c := range cs {
		got = append(got, c.Key)
	}
	assert.ElementsMatch(t, keys, got)
}

func TestDecode(t *testing.T) {
	c, ok := decode("1 3 5000 0 2 3 abchttps://x y")
	assert.True(t, ok)
	assert.Equal(t, fleet.Change{Kind: fleet.ChangeOpen, Instance: "abc", Key: "https://x y", For: 5 * time.Second, Reporters: 2}, c)
	for _, bad := range []string{"", "1", "2 3 5000 0 2 3 abc", "1 9 0 0 0 0 ", "1 3 -1 0 0 0 ", "1 3 0 0 0 4 abc",
		"1 3 99999999999999999999 0 0 0 ", "1 3 x 0 0 0 "} {
		_, ok := decode(bad)
		assert.False(t, ok, "%q", bad)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add("1 3 5000 0 2 3 abchttps://x y")
	f.Fuzz(func(t *testing.T, p string) {
		c, ok := decode(p)
		if ok && (c.For < 0 || c.Age < 0 || len(c.Instance)+len(c.Key) > len(p)) {
			t.Fatalf("%q: %+v", p, c)
		}
	})
}

// The server is killed and started again on the same port: the watchers
// resubscribe and take a snapshot again within 2 s, and an open announced
// after the restart reaches them.
func TestServerRestart(t *testing.T) {
	srv := startRedis(t)
	p := prefix(t)
	var ws []*watcher
	for range 3 {
		w := startWatcher(t, New(srv.client(t), Options{Prefix: p, SnapshotPeriod: -1}))
		require.True(t, w.waitSnapshot(t, 2*time.Second), "first snapshot")
		ws = append(ws, w)
	}
	s := New(srv.client(t), Options{Prefix: p})
	require.NoError(t, s.Announce(bg(t), fleet.Change{Kind: fleet.ChangeHold, Instance: "a", Key: "before", For: time.Minute}))

	srv.Kill()
	srv.Restart()
	up := time.Now()
	for i, w := range ws {
		require.True(t, w.waitSnapshot(t, 2*time.Second-time.Since(up)), "watcher %d took no snapshot within 2 s of the restart", i)
	}
	t.Logf("all watchers took a snapshot %v after the server answered again", time.Since(up).Round(time.Millisecond))

	require.NoError(t, s.Announce(bg(t), fleet.Change{Kind: fleet.ChangeOpen, Instance: "a", Key: "after", For: 10 * time.Second}))
	for i, w := range ws {
		r, ok := w.waitFor(2*time.Second, func(c fleet.Change) bool { return c.Key == "after" })
		require.True(t, ok, "watcher %d: the open announced after the restart", i)
		assert.Equal(t, fleet.ChangeOpen, r.c.Kind)
	}
}

// A store's calls end with their context, even on a client that does not
// honour contexts itself, and even with the server paused.
func TestAnnounceHonoursContext(t *testing.T) {
	srv := startRedis(t)
	s := New(srv.client(t), Options{Prefix: prefix(t), Timeout: 200 * time.Millisecond})
	require.NoError(t, s.Announce(bg(t), fleet.Change{Kind: fleet.ChangeAlive, Instance: "a", For: time.Second}))
	srv.Pause()
	defer srv.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s.Announce(ctx, fleet.Change{Kind: fleet.ChangeAlive, Instance: "a", For: time.Second})
	took := time.Since(start)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, 150*time.Millisecond)
	_, err = s.readSnapshot(context.Background())
	assert.ErrorIs(t, err, context.DeadlineExceeded, "a snapshot is bounded by the store's timeout")
}

// A client with go-redis's defaults (RESP3, its handshakes) works as well,
// and resubscribes after a restart.
func TestDefaultClient(t *testing.T) {
	srv := startRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	s := New(rdb, Options{Prefix: prefix(t)})
	w := startWatcher(t, New(rdb, Options{Prefix: prefix(t), SnapshotPeriod: -1}))
	require.True(t, w.waitSnapshot(t, 2*time.Second), "first snapshot")
	require.NoError(t, s.Announce(bg(t), fleet.Change{Kind: fleet.ChangeOpen, Instance: "a", Key: "k", For: time.Second}))
	_, ok := w.waitFor(2*time.Second, func(c fleet.Change) bool { return c.Key == "k" })
	require.True(t, ok, "pushed")
	srv.Kill()
	srv.Restart()
	require.True(t, w.waitSnapshot(t, 2*time.Second), "snapshot after the restart")
}

// On a Redis Cluster every key of a store is in one slot, as its scripts
// need: announcing, pushing and snapshots work through a ClusterClient.
func TestCluster(t *testing.T) {
	srv := startCluster(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { _ = rdb.Close() })
	p := prefix(t)
	s := New(rdb, Options{Prefix: p})
	w := startWatcher(t, New(rdb, Options{Prefix: p}))
	require.True(t, w.waitSnapshot(t, 5*time.Second), "first snapshot")
	for _, key := range []string{"https://a.example.com", "https://b.example.com:8443", "tenant-7"} {
		require.NoError(t, s.Announce(bg(t), fleet.Change{Kind: fleet.ChangeFailing, Instance: "b", Key: key, For: 4 * time.Second}))
		require.NoError(t, s.Announce(bg(t), fleet.Change{Kind: fleet.ChangeOpen, Instance: "a", Key: key, For: 5 * time.Second}))
		r, ok := w.waitFor(2*time.Second, func(c fleet.Change) bool { return c.Kind == fleet.ChangeOpen && c.Key == key })
		require.True(t, ok, "pushed: %s", key)
		assert.Equal(t, 2, r.c.Reporters)
	}
	cs, err := s.readSnapshot(bg(t))
	require.NoError(t, err)
	assert.Len(t, cs, 3)
	for _, c := range cs {
		assert.Equal(t, 2, c.Reporters, "%+v", c)
	}
}

// Watch returns soon after its context ends, even with the server paused,
// and leaves no goroutine behind once the client is closed.
func TestWatchStops(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	srv := startRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	s := New(rdb, Options{Prefix: prefix(t), SnapshotPeriod: 50 * time.Millisecond, Timeout: time.Second})
	snapped := make(chan struct{}, 1)
	s.onSnapshot = func() {
		select {
		case snapped <- struct{}{}:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx, func(fleet.Change) {}) }()
	select {
	case <-snapped:
	case <-time.After(2 * time.Second):
		t.Fatal("no snapshot")
	}
	srv.Pause()
	timer := time.NewTimer(200 * time.Millisecond) // a periodic snapshot is stuck by now
	<-timer.C
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
		t.Logf("Watch returned %v after its context ended, the server paused", time.Since(start))
		assert.Less(t, time.Since(start), 500*time.Millisecond)
	case <-time.After(5 * time.Second):
		t.Error("Watch did not return within 5 s of its context's end")
	}
	srv.Resume()
	require.NoError(t, rdb.Close())
	goleak.VerifyNone(t, ignore)
}

func TestNewOptions(t *testing.T) {
	s := New(nil, Options{})
	assert.Equal(t, "retryhttp:{fleet}:open", s.open)
	assert.Equal(t, "retryhttp:changes", s.channel)
	assert.Equal(t, DefaultSnapshotPeriod, s.period)
	assert.Equal(t, DefaultTimeout, s.timeout)
	s = New(nil, Options{Prefix: "retryhttp:{prod}:", SnapshotPeriod: -1, Timeout: -1})
	assert.Equal(t, "retryhttp:{prod}:{fleet}:hold", s.hold)
	assert.Negative(t, s.period)
	assert.Equal(t, DefaultTimeout, s.timeout)
	assert.Panics(t, func() { New(nil, Options{Prefix: "a{}:"}) })
	assert.NotPanics(t, func() { New(nil, Options{Prefix: "a{:"}) })
}
