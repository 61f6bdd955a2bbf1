package perkey

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

// defaults is the configuration of the root package's default breaker.
func defaults() Config {
	return Config{Circuits: true, Span: 2e9, MinFailures: 5, FailureRatio: 0.5, OpenFor: 5e9, OpenJitter: 5e9, Probes: 1}
}

// A closed circuit admits and records a success without allocating.
func TestLaneClosedAllocs(t *testing.T) {
	l := NewSet(defaults()).Lane(Key{})
	allocs := testing.AllocsPerRun(1000, func() {
		tk, _, err := l.Admit(context.Background(), Limits{})
		if err != nil {
			panic(err)
		}
		l.Done(tk, Outcome{Kind: Success})
	})
	assert.Zero(t, allocs, "allocations per Admit+Done: got %v, want 0", allocs)
}

// BenchmarkLaneClosed measures the hot path of a closed circuit: Admit and
// Done with a success, on one goroutine and on all of them sharing a lane.
func BenchmarkLaneClosed(b *testing.B) {
	ctx := context.Background()
	b.Run("single", func(b *testing.B) {
		l := NewSet(defaults()).Lane(Key{})
		b.ReportAllocs()
		for b.Loop() {
			tk, _, err := l.Admit(ctx, Limits{})
			if err != nil {
				b.Fatal(err)
			}
			l.Done(tk, Outcome{Kind: Success})
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l := NewSet(defaults()).Lane(Key{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				tk, _, err := l.Admit(ctx, Limits{})
				if err != nil {
					panic(err)
				}
				l.Done(tk, Outcome{Kind: Success})
			}
		})
	})
}
