package retryhttp

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"math/big"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// draws is the number of delays each distribution case draws.
const draws = 100_000

// buckets is the number of equal buckets of a histogram.
const buckets = 10

// bucketTolerance is how far a bucket count may stray from draws/buckets.
// A bucket's count is Binomial(100,000, 0.1): mean 10,000, standard
// deviation sqrt(100,000·0.1·0.9) = sqrt(9,000) ≈ 95. ±500 (±5% relative)
// is more than 5.2 sigma: a correct generator fails one bucket in about
// 5 million, so one run of this file (about 40 histograms of 10 buckets) in
// about 10,000. A biased draw (say the top of the interval never reached,
// or the cap applied after jitter) moves whole buckets by thousands.
const bucketTolerance = 500

// interval is the set of durations a policy may return: [lo, lo+width),
// width counted in nanoseconds. A closed interval [lo, hi] has width
// hi-lo+1.
type interval struct {
	lo, width time.Duration
}

func (iv interval) String() string {
	return fmt.Sprintf("[%v, %v)", iv.lo, iv.lo+iv.width)
}

// halfOpen is [lo, hi).
func halfOpen(lo, hi time.Duration) interval { return interval{lo, hi - lo} }

// closed is [lo, hi].
func closed(lo, hi time.Duration) interval { return interval{lo, hi - lo + 1} }

// requireUniform draws `draws` delays, fails on the first one outside iv,
// and requires each of `buckets` equal buckets of iv to hold draws/buckets
// ± bucketTolerance. iv.width must be at most MaxInt64/buckets, which every
// interval up to the default cap is by far.
func requireUniform(t *testing.T, iv interval, draw func() time.Duration) {
	t.Helper()
	require.Greater(t, iv.width, time.Duration(0), "empty interval %v", iv)
	require.LessOrEqual(t, iv.width, time.Duration(math.MaxInt64/buckets), "interval %v too wide to bucket", iv)
	var counts [buckets]int
	for range draws {
		d := draw()
		off := d - iv.lo
		// Checked by hand, not with require, to keep the loop cheap under -race.
		if off < 0 || off >= iv.width {
			t.Fatalf("drew %v (%d ns), want it in %v", d, d, iv)
		}
		counts[off*buckets/iv.width]++
	}
	want := draws / buckets
	for i, got := range counts {
		if got < want-bucketTolerance || got > want+bucketTolerance {
			t.Errorf("bucket %d of %v holds %d draws, want %d ± %d; all buckets: %v",
				i, iv, got, want, bucketTolerance, counts)
		}
	}
}

// wantBound is min(cap, base·2^(n−1)) as the policies document it, with the
// documented defaults for fields <= 0 and n < 1 counted as 1, computed in
// arbitrary precision so that it cannot share an overflow with the code
// under test.
func wantBound(n int, base, maxd time.Duration) time.Duration {
	if base <= 0 {
		base = defaultBase
	}
	if maxd <= 0 {
		maxd = defaultCap
	}
	if n < 1 {
		n = 1
	}
	// Past 2^64 every bound is capped; stop shifting there.
	b := new(big.Int).Lsh(big.NewInt(int64(base)), uint(min(n-1, 64)))
	if b.Cmp(big.NewInt(int64(maxd))) > 0 {
		return maxd
	}
	return time.Duration(b.Int64())
}

// wantDecorrelated is [Base, min(Cap, 3·prev)] as DecorrelatedJitter
// documents it: defaults for fields <= 0, a Cap below Base raised to Base,
// prev below Base (0 included) treated as Base.
func wantDecorrelated(base, maxd, prev time.Duration) interval {
	if base <= 0 {
		base = defaultBase
	}
	if maxd <= 0 {
		maxd = defaultCap
	}
	maxd = max(maxd, base)
	prev = max(prev, base)
	hi := maxd
	if p3 := new(big.Int).Mul(big.NewInt(3), big.NewInt(int64(prev))); p3.Cmp(big.NewInt(int64(maxd))) < 0 {
		hi = time.Duration(p3.Int64())
	}
	return closed(base, hi)
}

func TestPolicyFullJitterUniform(t *testing.T) {
	t.Parallel() // shares nothing with other tests
	cases := []struct {
		name string
		p    FullJitter
		n    int
		want interval
	}{
		{"n=1/defaults", FullJitter{}, 1, halfOpen(0, 200*time.Millisecond)},
		{"n=2/defaults", FullJitter{}, 2, halfOpen(0, 400*time.Millisecond)},
		{"n=5/defaults", FullJitter{}, 5, halfOpen(0, 3200*time.Millisecond)},
		{"n=8/defaults/last_uncapped", FullJitter{}, 8, halfOpen(0, 25600*time.Millisecond)},
		{"n=10/cap_binds", FullJitter{Base: 200 * time.Millisecond, Cap: 30 * time.Second}, 10, halfOpen(0, 30*time.Second)},
		{"n=3/base1s_cap10s", FullJitter{Base: time.Second, Cap: 10 * time.Second}, 3, halfOpen(0, 4*time.Second)},
		{"n=1000/cap", FullJitter{}, 1000, halfOpen(0, 30*time.Second)},
		{"n=MaxInt/cap", FullJitter{}, math.MaxInt, halfOpen(0, 30*time.Second)},
		{"n=0/counts_as_1", FullJitter{}, 0, halfOpen(0, 200*time.Millisecond)},
		{"n=-5/counts_as_1", FullJitter{}, -5, halfOpen(0, 200*time.Millisecond)},
		{"negative_fields/defaults", FullJitter{Base: -time.Second, Cap: -time.Second}, 3, halfOpen(0, 800*time.Millisecond)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, halfOpen(0, wantBound(c.n, c.p.Base, c.p.Cap)), "table disagrees with the documented bound")
			requireUniform(t, c.want, func() time.Duration { return c.p.Delay(c.n, 0) })
		})
	}
}

func TestPolicyEqualJitterUniform(t *testing.T) {
	t.Parallel() // shares nothing with other tests
	cases := []struct {
		name string
		p    EqualJitter
		n    int
		want interval
	}{
		{"n=1/defaults", EqualJitter{}, 1, halfOpen(100*time.Millisecond, 200*time.Millisecond)},
		{"n=2/defaults", EqualJitter{}, 2, halfOpen(200*time.Millisecond, 400*time.Millisecond)},
		{"n=5/defaults", EqualJitter{}, 5, halfOpen(1600*time.Millisecond, 3200*time.Millisecond)},
		{"n=10/cap_binds", EqualJitter{Base: 200 * time.Millisecond, Cap: 30 * time.Second}, 10, halfOpen(15*time.Second, 30*time.Second)},
		{"n=MaxInt/cap", EqualJitter{}, math.MaxInt, halfOpen(15*time.Second, 30*time.Second)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := wantBound(c.n, c.p.Base, c.p.Cap)
			require.Equal(t, c.want, halfOpen(d/2, d), "table disagrees with the documented bound")
			requireUniform(t, c.want, func() time.Duration { return c.p.Delay(c.n, 0) })
		})
	}
}

func TestPolicyDecorrelatedJitterUniform(t *testing.T) {
	t.Parallel() // shares nothing with other tests
	p := DecorrelatedJitter{Base: 200 * time.Millisecond, Cap: 30 * time.Second}
	cases := []struct {
		name string
		p    DecorrelatedJitter
		prev time.Duration
		want interval
	}{
		{"prev=0/treated_as_base", p, 0, closed(200*time.Millisecond, 600*time.Millisecond)},
		{"prev=-1s/treated_as_base", p, -time.Second, closed(200*time.Millisecond, 600*time.Millisecond)},
		{"prev=100ms/below_base", p, 100 * time.Millisecond, closed(200*time.Millisecond, 600*time.Millisecond)},
		{"prev=base", p, 200 * time.Millisecond, closed(200*time.Millisecond, 600*time.Millisecond)},
		{"prev=1s", p, time.Second, closed(200*time.Millisecond, 3*time.Second)},
		{"prev=10s/3prev_equals_cap", p, 10 * time.Second, closed(200*time.Millisecond, 30*time.Second)},
		{"prev=15s/cap_binds", p, 15 * time.Second, closed(200*time.Millisecond, 30*time.Second)},
		{"prev=MaxInt64/cap_binds", p, math.MaxInt64, closed(200*time.Millisecond, 30*time.Second)},
		{"zero_fields/defaults", DecorrelatedJitter{}, 0, closed(200*time.Millisecond, 600*time.Millisecond)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, wantDecorrelated(c.p.Base, c.p.Cap, c.prev), "table disagrees with the documented bound")
			requireUniform(t, c.want, func() time.Duration { return c.p.Delay(1, c.prev) })
		})
	}
}

func TestPolicyExponentialExact(t *testing.T) {
	const ms = time.Millisecond
	cases := []struct {
		name string
		p    Exponential
		n    int
		want time.Duration
	}{
		{"n=1", Exponential{}, 1, 200 * ms},
		{"n=2", Exponential{}, 2, 400 * ms},
		{"n=3", Exponential{}, 3, 800 * ms},
		{"n=4", Exponential{}, 4, 1600 * ms},
		{"n=5", Exponential{}, 5, 3200 * ms},
		{"n=6", Exponential{}, 6, 6400 * ms},
		{"n=7", Exponential{}, 7, 12800 * ms},
		{"n=8", Exponential{}, 8, 25600 * ms},
		{"n=9/capped", Exponential{}, 9, 30 * time.Second},
		{"n=10/capped", Exponential{}, 10, 30 * time.Second},
		{"n=1000/capped", Exponential{}, 1000, 30 * time.Second},
		{"n=MaxInt/capped", Exponential{}, math.MaxInt, 30 * time.Second},
		{"n=0/counts_as_1", Exponential{}, 0, 200 * ms},
		{"n=MinInt/counts_as_1", Exponential{}, math.MinInt, 200 * ms},
		{"base1s_cap5s/n=3", Exponential{Base: time.Second, Cap: 5 * time.Second}, 3, 4 * time.Second},
		{"base1s_cap5s/n=4/capped", Exponential{Base: time.Second, Cap: 5 * time.Second}, 4, 5 * time.Second},
		{"cap_equals_2^k_base", Exponential{Base: time.Second, Cap: 8 * time.Second}, 4, 8 * time.Second},
		{"base1ns_capMax/n=63", Exponential{Base: 1, Cap: math.MaxInt64}, 63, 1 << 62},
		{"base1ns_capMax/n=64/capped", Exponential{Base: 1, Cap: math.MaxInt64}, 64, math.MaxInt64},
		{"baseMax/n=2", Exponential{Base: math.MaxInt64, Cap: math.MaxInt64}, 2, math.MaxInt64},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, wantBound(c.n, c.p.Base, c.p.Cap), "table disagrees with the documented bound")
			for range 10 {
				require.Equal(t, c.want, c.p.Delay(c.n, 0), "Exponential%+v.Delay(%d, 0)", c.p, c.n)
			}
		})
	}
}

// TestPolicyBounds checks, for extreme retry numbers and field values, that
// no policy overflows, goes negative, or leaves its documented bound.
func TestPolicyBounds(t *testing.T) {
	type fields struct{ base, cap time.Duration }
	configs := []struct {
		name string
		f    fields
	}{
		{"zero", fields{0, 0}},
		{"negative", fields{-time.Second, -time.Minute}},
		{"base1ns_capMax", fields{1, math.MaxInt64}},
		{"baseMax_capMax", fields{math.MaxInt64, math.MaxInt64}},
		{"base_capMax", fields{200 * time.Millisecond, math.MaxInt64}},
		{"baseMin_capNeg", fields{math.MinInt64, math.MinInt64}},
	}
	ns := []int{math.MinInt, -1, 0, 1, 2, 10, 62, 63, 64, 65, 1000, math.MaxInt}
	prevs := []time.Duration{math.MinInt64, 0, 1, 200 * time.Millisecond, 20 * time.Second, math.MaxInt64 / 3, math.MaxInt64}
	// Fewer draws per combination than the histograms: this checks bounds,
	// and 6 configurations × 12 n × 7 prev × 4 policies multiply quickly.
	const perCombo = 200
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			base, maxd := c.f.base, c.f.cap
			for _, n := range ns {
				d := wantBound(n, base, maxd)
				checks := []struct {
					name string
					p    Policy
					want interval
				}{
					{"FullJitter", FullJitter{base, maxd}, halfOpen(0, d)},
					{"EqualJitter", EqualJitter{base, maxd}, halfOpen(d/2, d)},
					{"Exponential", Exponential{base, maxd}, closed(d, d)},
				}
				for _, ch := range checks {
					for _, prev := range prevs {
						for range perCombo {
							got := ch.p.Delay(n, prev)
							if got < ch.want.lo || got-ch.want.lo >= ch.want.width {
								t.Fatalf("%s%+v.Delay(%d, %v) = %v (%d ns), want it in %v", ch.name, ch.p, n, prev, got, got, ch.want)
							}
						}
					}
				}
			}
			for _, prev := range prevs {
				p := DecorrelatedJitter{base, maxd}
				want := wantDecorrelated(base, maxd, prev)
				for _, n := range ns {
					for range perCombo {
						got := p.Delay(n, prev)
						if got < want.lo || got-want.lo >= want.width {
							t.Fatalf("DecorrelatedJitter%+v.Delay(%d, %v) = %v (%d ns), want it in %v", p, n, prev, got, got, want)
						}
					}
				}
			}
		})
	}
}

// TestPolicyCapBelowBase pins what a Cap below Base means. The doc comments
// of FullJitter, EqualJitter and Exponential promise min(Cap, Base·2^(n−1)),
// which is Cap; DecorrelatedJitter documents that such a Cap is raised to
// Base.
func TestPolicyCapBelowBase(t *testing.T) {
	const base, maxd = time.Second, 500 * time.Millisecond
	t.Run("DecorrelatedJitter/cap_raised_to_base", func(t *testing.T) {
		p := DecorrelatedJitter{Base: base, Cap: maxd}
		for _, prev := range []time.Duration{0, base, time.Hour} {
			for range draws {
				if got := p.Delay(1, prev); got != base {
					t.Fatalf("DecorrelatedJitter%+v.Delay(1, %v) = %v, want %v", p, prev, got, base)
				}
			}
		}
	})
	t.Run("Exponential/cap", func(t *testing.T) {
		p := Exponential{Base: base, Cap: maxd}
		for _, n := range []int{1, 2, 1000} {
			require.Equal(t, maxd, p.Delay(n, 0), "Exponential%+v.Delay(%d, 0)", p, n)
		}
	})
	t.Run("FullJitter/cap", func(t *testing.T) {
		p := FullJitter{Base: base, Cap: maxd}
		requireUniform(t, halfOpen(0, maxd), func() time.Duration { return p.Delay(1, 0) })
	})
	t.Run("EqualJitter/cap", func(t *testing.T) {
		p := EqualJitter{Base: base, Cap: maxd}
		requireUniform(t, halfOpen(maxd/2, maxd), func() time.Duration { return p.Delay(1, 0) })
	})
}

// TestPolicyOddCap checks the documented bound to the nanosecond where the
// cap is not a multiple of 2 (or of 3 for DecorrelatedJitter).
func TestPolicyOddCap(t *testing.T) {
	require.Equal(t, time.Duration(2), Exponential{Base: 1, Cap: 3}.Delay(2, 0))
	require.Equal(t, time.Duration(4), Exponential{Base: 1, Cap: 5}.Delay(3, 0))
	p := DecorrelatedJitter{Base: 1, Cap: 10}
	for range draws {
		if got := p.Delay(1, 3); got > 9 {
			t.Fatalf("DecorrelatedJitter%+v.Delay(1, 3) = %v, want it in [1ns, 9ns]", p, got)
		}
	}
}

// TestPolicyTransportsDrawDifferentSequences checks that two transports in
// one process do not share a sequence: a herd of clients built the same way
// must not retry in step.
func TestPolicyTransportsDrawDifferentSequences(t *testing.T) {
	seq := func(tr *Transport) []time.Duration {
		s := make([]time.Duration, 20)
		for i := range s {
			s[i] = tr.s.policy.Delay(i+1, 0)
		}
		return s
	}
	a, b := New(nil), New(nil)
	sa, sb := seq(a), seq(b)
	require.NotEqual(t, sa, sb, "two transports drew the same 20 delays")
}

// policyHelperEnv makes the test binary, run as a child process, print
// draws instead of testing (see TestPolicySeedPerProcess).
const policyHelperEnv = "RETRYHTTP_TEST_POLICY_DRAWS"

// TestPolicySeedPerProcess checks that the generator is seeded per process,
// never with a fixed seed: two processes that make the same calls draw
// different delays. Two transports in one process (above) would differ even
// with a fixed seed, because they share one advancing generator.
func TestPolicySeedPerProcess(t *testing.T) {
	t.Parallel() // heavy; shares nothing with other tests
	if os.Getenv(policyHelperEnv) != "" {
		return // the child side runs in TestPolicyHelperProcess
	}
	// Both children run at once.
	type child struct {
		cmd *exec.Cmd
		out bytes.Buffer
	}
	var children [2]child
	for i := range children {
		c := &children[i]
		c.cmd = childTest("TestPolicyHelperProcess", policyHelperEnv)
		c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
		require.NoError(t, c.cmd.Start())
	}
	var seqs [2][]string
	for i := range children {
		c := &children[i]
		require.NoError(t, c.cmd.Wait(), "child: %s", c.out.String())
		sc := bufio.NewScanner(&c.out)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "draw "); ok {
				seqs[i] = append(seqs[i], d)
			}
		}
		require.Len(t, seqs[i], 20, "child output: %s", c.out.String())
	}
	a, b := seqs[0], seqs[1]
	require.NotEqual(t, a, b, "two processes drew the same 20 delays: a fixed seed?")
}

// childTest returns the command that runs this test binary's test name,
// alone, in a child process, with env set to 1 in its environment: the
// child's side of a test that needs a process of its own. Under -race a
// process sleeps a second before it exits (GORACE atexit_sleep_ms, 1000
// by default), for reports from other threads; the child's reports, if
// any, come while its test runs, so it exits at once.
// inChild runs the test t in a child process of its own, with env set,
// unless this process is that child; it reports whether it did, in which
// case the caller returns: the child's result is t's. A test that measures
// the whole process (its heap, its goroutines) runs alone there, while the
// others run beside it here.
func inChild(t *testing.T, env string) bool {
	t.Helper()
	if os.Getenv(env) != "" {
		return false
	}
	t.Parallel() // heavy; shares nothing with other tests
	out, err := childTest(t.Name(), env).CombinedOutput()
	t.Logf("in a child process:\n%s", out)
	require.NoError(t, err, "the child process failed")
	require.Contains(t, string(out), "--- PASS: "+t.Name(), "the child ran the test")
	return true
}

func childTest(name, env string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env+"=1", "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	return cmd
}

// TestPolicyHelperProcess is the child of TestPolicySeedPerProcess; run
// directly it does nothing.
func TestPolicyHelperProcess(t *testing.T) {
	if os.Getenv(policyHelperEnv) == "" {
		return
	}
	for n := 1; n <= 20; n++ {
		fmt.Printf("draw %d\n", int64(FullJitter{}.Delay(n, 0)))
	}
}

// immediate retries without waiting: the tests' policy where the delay
// between attempts would only slow them down. A Retry-After still applies.
type immediate struct{}

func (immediate) Delay(int, time.Duration) time.Duration { return 0 }
func (immediate) MaxDelay() time.Duration                { return 0 }
