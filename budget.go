package retryhttp

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/retryhttp/retryhttp/internal/perkey"
	"golang.org/x/time/rate"
)

// Budget defaults.
const (
	// defaultBudgetRatio lets retries add at most 10% to the load that
	// original requests make: in a herd of 10,000 deliveries failing for
	// 20 s it cuts the wasted attempts by about 90% (internal/herdsim).
	defaultBudgetRatio = 0.1
	// defaultBudgetMinPerSecond lets a quiet client still retry, ten times a
	// second, when it has made too few requests to earn tokens.
	defaultBudgetMinPerSecond = 10
	// defaultBudgetMaxTokens caps the tokens banked from deposits: what a
	// batch of 10,000 deliveries earns at the default ratio, and gRPC's
	// largest retry-throttling maxTokens. It bounds how
	// many retries a long healthy spell can save up for the next outage.
	defaultBudgetMaxTokens = 1000
)

// BudgetConfig configures a Budget. The zero value means every default;
// the package's rule for settings holds for every field, and Ratio,
// MinPerSecond and MaxTokens are at most a billion.
type BudgetConfig struct {
	// Ratio is the tokens each original request deposits; a retry costs
	// one, so retries add at most Ratio to the load. 0 means 0.1;
	// negative, no deposits: the floor alone.
	Ratio float64
	// MinPerSecond is the floor: tokens that refill every second whatever
	// the traffic, one second's worth banked from the start, so that a
	// quiet client can retry. 0 means 10; negative, no floor.
	MinPerSecond float64
	// MaxTokens caps the tokens banked from deposits. 0 means 1,000.
	MaxTokens float64
	PerHost   bool // a budget per key, so that one dead tenant cannot spend the others' retries
	// MaxHosts is how many keys' budgets PerHost keeps before idle ones
	// are evicted, least recently used first. 0 means 65,536.
	MaxHosts int
}

// Budget is a token-bucket retry budget: every original request deposits
// Ratio tokens, a floor refills MinPerSecond, and every retry withdraws
// one; a retry that finds none waits for its key, as WithMaxWait allows,
// or is not made. It may be shared between transports.
type Budget struct {
	ratio   int64 // micro-tokens deposited per original request
	max     int64 // cap of banked micro-tokens
	perSec  float64
	perHost bool

	global *bucket // nil when perHost
	hosts  perkey.Table[*bucket]

	joined atomic.Bool  // shared through a fleet, which shares the floor and cap out
	shares atomic.Int64 // the fleet's size: the floor and cap are divided by it; 0 means 1
}

// unit is the fixed-point scale of banked tokens: one token is a million
// micro-tokens, so a deposit of 0.1 token is an integer add and a Ratio as
// small as 0.000001 (one retry per million requests) still counts.
const unit = 1_000_000

// maxBudgetTokens bounds Ratio, MinPerSecond and MaxTokens: a billion
// tokens is more than any client spends, and keeps every count in
// micro-tokens, and the floor's burst, within their integers.
const maxBudgetTokens = 1e9

// NewBudget returns a Budget configured by c.
func NewBudget(c BudgetConfig) *Budget {
	for _, v := range []*float64{&c.Ratio, &c.MinPerSecond, &c.MaxTokens} {
		if math.IsNaN(*v) {
			*v = 0 // the default
		}
		// Bounded so that micro-tokens, and the floor's burst, fit their
		// integers: more than anyone can spend is as good as infinite.
		*v = min(*v, maxBudgetTokens)
	}
	if c.Ratio == 0 {
		c.Ratio = defaultBudgetRatio
	}
	if c.MinPerSecond == 0 {
		c.MinPerSecond = defaultBudgetMinPerSecond
	}
	if c.MaxTokens <= 0 {
		c.MaxTokens = defaultBudgetMaxTokens
	}
	b := &Budget{
		ratio:   int64(math.Round(min(max(c.Ratio, 0), math.MaxInt64/(4*unit)) * unit)),
		max:     int64(math.Round(min(c.MaxTokens, math.MaxInt64/(4*unit)) * unit)),
		perSec:  max(c.MinPerSecond, 0),
		perHost: c.PerHost,
	}
	if !c.PerHost {
		b.global = b.newBucket()
	}
	b.hosts.Idle = (*bucket).idle
	b.hosts.Max = c.MaxHosts
	return b
}

// bucket is one budget's tokens: deposits banked in micro-tokens, and the
// floor's limiter.
type bucket struct {
	banked atomic.Int64  // micro-tokens, 0 <= banked <= max
	floor  *rate.Limiter // nil when there is no floor
	max    atomic.Int64  // micro-tokens: the budget's cap, divided by the fleet's size
}

func (b *Budget) newBucket() *bucket {
	k := &bucket{}
	if b.perSec > 0 {
		k.floor = rate.NewLimiter(rate.Limit(b.perSec), int(math.Ceil(b.perSec)))
	}
	b.shareBucket(k, max(int(b.shares.Load()), 1))
	return k
}

// share divides the floor, its burst and the cap of every bucket by n, the
// number of processes sharing one host's retries through a fleet.
func (b *Budget) share(n int) {
	n = max(n, 1)
	b.shares.Store(int64(n))
	if b.global != nil {
		b.shareBucket(b.global, n)
	}
	for _, k := range b.hosts.Values() {
		b.shareBucket(k, n)
	}
}

func (b *Budget) shareBucket(k *bucket, n int) {
	k.max.Store(b.max / int64(n))
	if k.floor != nil {
		perSec := b.perSec / float64(n)
		k.floor.SetLimit(rate.Limit(perSec))
		k.floor.SetBurst(int(math.Ceil(perSec)))
	}
}

// bucketFor returns the bucket of the host, creating it if needed.
func (b *Budget) bucketFor(k hostKey) *bucket {
	if b.global != nil {
		return b.global
	}
	return b.hosts.Get(k, func(hostKey) *bucket { return b.newBucket() })
}

// deposit credits one original request to the host's bucket. It takes no
// lock: one atomic load when the bank is full, a compare-and-swap otherwise,
// so the bank stays within [0, max] under any interleaving.
func (b *Budget) deposit(k hostKey) {
	if b.ratio == 0 {
		return
	}
	bk := b.bucketFor(k)
	for v, most := bk.banked.Load(), bk.max.Load(); v < most; v = bk.banked.Load() {
		if bk.banked.CompareAndSwap(v, min(v+b.ratio, most)) {
			return
		}
	}
}

// withdraw takes one token for a retry to the host: from the bank first,
// then from the floor. It reports whether a token was taken.
func (b *Budget) withdraw(k hostKey) bool {
	bk := b.bucketFor(k)
	return bk.takeBanked(0) || (bk.floor != nil && bk.floor.Allow())
}

// withdrawAbove takes one banked token for a hedge to the host, only
// while the bank holds more than reserve tokens: what retries need comes
// first.
func (b *Budget) withdrawAbove(k hostKey, reserve int64) bool {
	return b.bucketFor(k).takeBanked(reserve)
}

// takeBanked takes one banked token while the bank holds more than
// reserve whole tokens, and reports whether it did.
func (bk *bucket) takeBanked(reserve int64) bool {
	for {
		v := bk.banked.Load()
		if v < (reserve+1)*unit {
			return false
		}
		if bk.banked.CompareAndSwap(v, v-unit) {
			return true
		}
	}
}

// tokens returns the whole and fractional tokens the host could spend at t:
// banked plus the floor's.
func (b *Budget) tokens(k hostKey, t time.Time) float64 {
	bk := b.bucketFor(k)
	n := float64(bk.banked.Load()) / unit
	if bk.floor != nil {
		n += bk.floor.TokensAt(t)
	}
	return n
}

// tokenAt returns when the key's bucket will next hold a whole token: now
// if it does, later as the floor refills, the zero time if it has no floor
// (only new requests' deposits refill it). spread is one token's refill
// time.
func (b *Budget) tokenAt(k hostKey, now time.Time) (at time.Time, spread time.Duration) {
	bk := b.global
	if bk == nil {
		bk = b.hosts.Peek(k)
		if bk == nil {
			return now, 0 // a fresh bucket starts with its floor full
		}
	}
	n := float64(bk.banked.Load()) / unit
	if bk.floor != nil {
		n += bk.floor.TokensAt(now)
	}
	if n >= 1 {
		return now, 0
	}
	if b.perSec <= 0 {
		return time.Time{}, 0
	}
	perToken := time.Duration(float64(time.Second) / b.perSec)
	return now.Add(time.Duration((1 - n) * float64(perToken))), perToken
}

// idle reports that dropping the bucket loses nothing that protects its
// host: a fresh bucket starts with a full floor and an empty bank, so a
// bucket whose floor is full grants no fewer retries than a fresh one. Its
// banked deposits are lost, which only makes the budget stricter.
func (k *bucket) idle(now time.Time) bool {
	return k.floor == nil || k.floor.TokensAt(now) >= float64(k.floor.Burst())
}

// fleetBudget is a Budget as a fleet calls it (fleetlink.Budget), without
// an exported method on Budget itself.
type fleetBudget Budget

// Join implements fleetlink.Budget: the budget is shared through the
// first fleet it joins.
func (b *fleetBudget) Join() bool { return b.joined.CompareAndSwap(false, true) }

// Share implements fleetlink.Budget.
func (b *fleetBudget) Share(n int) { (*Budget)(b).share(n) }
