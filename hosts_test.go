package retryhttp

import (
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestKeyOf checks that one host has one key however its URL spells it.
func TestKeyOf(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"http://example.test/x", "http://EXAMPLE.test:80/y"},
		{"https://example.test/", "https://example.test:443/"},
	} {
		ua, err := url.Parse(tc.a)
		require.NoError(t, err)
		ub, err := url.Parse(tc.b)
		require.NoError(t, err)
		require.Equal(t, keyOf(ua), keyOf(ub), "%s and %s", tc.a, tc.b)
	}
	ua, _ := url.Parse("http://example.test/")
	ub, _ := url.Parse("https://example.test/")
	require.NotEqual(t, keyOf(ua), keyOf(ub), "the scheme is part of the host")
	uc, _ := url.Parse("http://example.test:8080/")
	require.NotEqual(t, keyOf(ua), keyOf(uc), "so is a port other than the default")
}

// TestTableSweepRacingGet holds a sweep in the middle of its pass, at the
// entry of one host, while a get for that host caches the entry the sweep
// is about to drop. After the sweep the host must be served by the entry
// the map holds, not by the dropped one: two entries for one host would
// split a circuit's state or double a per-host budget.
func TestTableSweepRacingGet(t *testing.T) {
	target := hostKey{scheme: "http", host: "target.test"}
	var (
		tb      table[*int]
		made    atomic.Int64
		paused  = make(chan struct{})
		resume  = make(chan struct{})
		holding atomic.Bool
	)
	mk := func() *int { v := int(made.Add(1)); return &v }
	first := tb.get(target, mk)
	tb.idle = func(v *int, _ time.Time) bool {
		if v == first && holding.CompareAndSwap(false, true) {
			close(paused)
			<-resume
		}
		return true
	}
	// Fill the table to its sweep threshold; the next insertion sweeps.
	for i := 1; i < minSweep; i++ {
		tb.get(hostKey{scheme: "http", host: fmt.Sprintf("h%d.test", i)}, mk)
	}
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		tb.get(hostKey{scheme: "http", host: "trigger.test"}, mk)
	}()
	<-paused
	// The sweep holds target's entry: it is still in the map, so this get
	// caches it.
	require.Same(t, first, tb.get(target, mk))
	close(resume)
	<-swept

	got := tb.get(target, mk)
	e, ok := tb.m.Load(target)
	require.True(t, ok, "the host has an entry in the map after the sweep")
	require.Same(t, e.(*entry[*int]).v, got, "the host is served by the map's entry, not a dropped one")
	require.NotSame(t, first, got, "the dropped entry is not handed out")
}

// mustParse parses a URL the test wrote.
func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u
}
