package redisstate

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/fleet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// The fleet quota batch: fqProcesses OS processes, each sending
// fqPerProcess GETs from fqWorkers workers, through one API key's quota of
// fqLimit requests a second (a fixed window, advertised in the IETF draft-8
// RateLimit fields, answered 429 with Retry-After beyond it).
const (
	fqProcesses  = 4
	fqPerProcess = 500
	fqWorkers    = 50
	fqLimit      = 100
	fqHorizon    = time.Minute
	fqChildEnv   = "RETRYHTTP_TEST_FLEET_QUOTA_CHILD"
)

// fixedWindow is the limiter: a window per second of the wall clock, as
// express-rate-limit keeps one, counting every request. It records the
// arrivals of each window.
type fixedWindow struct {
	mu       sync.Mutex
	windows  map[int64]int // arrivals by Unix second
	attempts int
	refused  int
}

func (l *fixedWindow) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	now := time.Now()
	sec := now.Unix()
	l.mu.Lock()
	l.windows[sec]++
	n := l.windows[sec]
	l.attempts++
	if n > fqLimit {
		l.refused++
	}
	l.mu.Unlock()
	reset := max(1, int((time.Unix(sec+1, 0).Sub(now)+time.Second-1)/time.Second))
	w.Header().Set("RateLimit-Policy", `"100-in-1sec"; q=`+strconv.Itoa(fqLimit)+`; w=1`)
	w.Header().Set("RateLimit", `"100-in-1sec"; r=`+strconv.Itoa(max(fqLimit-n, 0))+`; t=`+strconv.Itoa(reset))
	if n > fqLimit {
		w.Header().Set("Retry-After", strconv.Itoa(reset))
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// reset forgets what came before a round.
func (l *fixedWindow) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.windows, l.attempts, l.refused = map[int64]int{}, 0, 0
}

// perWindow returns the arrivals of each window from the first to the
// last, and the attempts and 429s in all.
func (l *fixedWindow) perWindow() (arrivals []int, attempts, refused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var secs []int64
	for s := range l.windows {
		secs = append(secs, s)
	}
	slices.Sort(secs)
	for s := secs[0]; s <= secs[len(secs)-1]; s++ {
		arrivals = append(arrivals, l.windows[s])
	}
	return arrivals, l.attempts, l.refused
}

// fqResult is what one process of a round reports.
type fqResult struct {
	Delivered int           `json:"delivered"`
	Done      time.Duration `json:"done"` // from "go" to its last answer
	Shares    float64       `json:"rate"` // the send rate its breaker paced the key at, at the end
}

// fqRound is what a round of fqProcesses processes did, at the server.
type fqRound struct {
	name              string
	delivered         int
	attempts, refused int
	done              time.Duration // the slowest process's
	arrivals          []int
	rates             []float64
}

func (r fqRound) String() string {
	return fmt.Sprintf("%s: delivered %d of %d, 429s %d of %d attempts (%.1f%%), %.2f s; per window %v; rates %v",
		r.name, r.delivered, fqProcesses*fqPerProcess, r.refused, r.attempts, 100*float64(r.refused)/float64(max(r.attempts, 1)),
		r.done.Seconds(), r.arrivals, r.rates)
}

// Four processes behind one quota, each through its own transport and a
// fleet on one Redis, pace to the quota together: at least 99% delivered,
// 429s at most 2% of attempts, within 1.05x the time of an oracle that
// paces each process at a quarter of 95% of the quota; with the store
// killed mid-batch, every process goes on at its last share and nothing is
// lost. Without the fleet, each process would pace to the whole quota.
func TestFleetQuota(t *testing.T) {
	if os.Getenv(fqChildEnv) != "" {
		return
	}
	redisSrv := startRedis(t)
	lim := &fixedWindow{windows: map[int64]int{}}
	host := httptest.NewServer(lim)
	defer host.Close()

	round := func(name, mode string, kill bool) fqRound {
		lim.reset()
		prefix := prefix(t) + name + ":"
		type child struct {
			cmd   *exec.Cmd
			in    io.WriteCloser
			lines chan string
		}
		children := make([]child, fqProcesses)
		for i := range children {
			cmd := exec.Command(os.Args[0], "-test.run=^TestFleetQuotaChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), fqChildEnv+"=1", "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0",
				"FQ_MODE="+mode, "FQ_URL="+host.URL, "FQ_REDIS="+redisSrv.Addr(), "FQ_PREFIX="+prefix, "FQ_INSTANCE="+name+strconv.Itoa(i))
			cmd.Stderr = os.Stderr
			in, err := cmd.StdinPipe()
			require.NoError(t, err)
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			lines := make(chan string, 16)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			children[i] = child{cmd, in, lines}
		}
		t.Cleanup(func() {
			for _, c := range children {
				_ = c.cmd.Process.Kill()
				_ = c.cmd.Wait()
			}
		})
		// next returns the child's next line of the protocol, skipping
		// go test's own.
		next := func(c child, d time.Duration) (string, bool) {
			timeout := time.After(d)
			for {
				select {
				case l, ok := <-c.lines:
					if !ok {
						return "", false
					}
					if strings.HasPrefix(l, "fq ") {
						return strings.TrimPrefix(l, "fq "), true
					}
				case <-timeout:
					return "", false
				}
			}
		}
		for i, c := range children {
			l, ok := next(c, 30*time.Second)
			require.True(t, ok && l == "ready", "%s: process %d ready: %q", name, i, l)
		}
		lim.reset()
		for _, c := range children {
			_, err := io.WriteString(c.in, "go\n")
			require.NoError(t, err)
		}
		if kill {
			// The store dies a third of the way through the batch.
			timer := time.AfterFunc(7*time.Second, redisSrv.Kill)
			defer timer.Stop()
		}
		r := fqRound{name: name}
		for i, c := range children {
			l, ok := next(c, fqHorizon+30*time.Second)
			require.True(t, ok, "%s: process %d's result", name, i)
			var res fqResult
			require.NoError(t, json.Unmarshal([]byte(l), &res), "%s: process %d: %q", name, i, l)
			require.NoError(t, c.cmd.Wait(), "%s: process %d", name, i)
			r.delivered += res.Delivered
			r.done = max(r.done, res.Done)
			r.rates = append(r.rates, res.Shares)
		}
		r.arrivals, r.attempts, r.refused = lim.perWindow()
		t.Log(r)
		return r
	}

	oracle := round("oracle", "oracle", false)
	require.Equal(t, fqProcesses*fqPerProcess, oracle.delivered, "the oracle delivers every request")
	alone := round("alone", "alone", false)
	_ = alone // for the figures: each process paces to the whole quota
	for i := range 2 {
		r := round("fleet"+strconv.Itoa(i+1), "fleet", false)
		assert.GreaterOrEqual(t, r.delivered, fqProcesses*fqPerProcess*99/100, "%s: delivered", r.name)
		assert.LessOrEqual(t, float64(r.refused), 0.02*float64(r.attempts), "%s: 429s at most 2%% of attempts", r.name)
		assert.LessOrEqual(t, r.done.Seconds(), 1.05*oracle.done.Seconds(), "%s: within 1.05x the oracle's time", r.name)
	}
	died := round("died", "fleet", true)
	assert.Equal(t, fqProcesses*fqPerProcess, died.delivered, "the store died: nothing lost")
	assert.LessOrEqual(t, float64(died.refused), 0.05*float64(died.attempts), "the store died: each at its last share")
}

// TestFleetQuotaChild is one process of TestFleetQuota's rounds; run
// directly it does nothing. It speaks to its parent in lines that start
// with "fq ": "ready" once its fleet counts every process, then, after the
// parent's "go", its result as JSON.
func TestFleetQuotaChild(t *testing.T) {
	if os.Getenv(fqChildEnv) == "" {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	next := &http.Transport{MaxIdleConnsPerHost: fqWorkers}
	defer next.CloseIdleConnections()
	var (
		rt      http.RoundTripper
		breaker *retryhttp.Breaker
	)
	switch os.Getenv("FQ_MODE") {
	case "oracle":
		rt = paced{next, rate.NewLimiter(0.95*fqLimit/fqProcesses, 1)}
	case "alone":
		breaker = retryhttp.NewBreaker(retryhttp.BreakerConfig{})
		rt = retryhttp.New(next, retryhttp.WithBreaker(breaker))
	case "fleet":
		rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("FQ_REDIS"), DisableIdentity: true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
		defer rdb.Close()
		f := fleet.New(New(rdb, Options{Prefix: os.Getenv("FQ_PREFIX")}), fleet.Config{Instance: os.Getenv("FQ_INSTANCE")})
		var running sync.WaitGroup
		running.Go(func() { _ = f.Run(ctx) })
		defer func() { cancel(); running.Wait() }()
		breaker = retryhttp.NewBreaker(retryhttp.BreakerConfig{})
		rt = retryhttp.New(next, retryhttp.WithBreaker(breaker), retryhttp.WithFleet(f))
		// Every process counts the others before the batch: at most 10 s.
		for deadline := time.Now().Add(10 * time.Second); f.Stats().Size < fqProcesses; {
			require.True(t, time.Now().Before(deadline), "fleet size %d", f.Stats().Size)
			time.Sleep(10 * time.Millisecond)
		}
	default:
		t.Fatalf("FQ_MODE %q", os.Getenv("FQ_MODE"))
	}
	fmt.Println("fq ready")
	_, err := bufio.NewReader(os.Stdin).ReadString('\n')
	require.NoError(t, err)

	start := time.Now()
	bctx, bcancel := context.WithTimeout(ctx, fqHorizon)
	defer bcancel()
	jobs := make(chan int, fqPerProcess)
	for i := range fqPerProcess {
		jobs <- i
	}
	close(jobs)
	var delivered atomic.Int64
	var last atomic.Int64
	var wg sync.WaitGroup
	for range fqWorkers {
		wg.Go(func() {
			for i := range jobs {
				req, err := http.NewRequestWithContext(bctx, http.MethodGet, os.Getenv("FQ_URL")+"/item/"+strconv.Itoa(i), nil)
				if err != nil {
					panic(err)
				}
				resp, err := rt.RoundTrip(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					delivered.Add(1)
					last.Store(int64(time.Since(start)))
				}
			}
		})
	}
	wg.Wait()
	res := fqResult{Delivered: int(delivered.Load()), Done: time.Duration(last.Load())}
	if breaker != nil {
		res.Shares = breaker.Host(strings.TrimSuffix(strings.TrimPrefix(os.Getenv("FQ_URL"), ""), "/")).Rate
	}
	b, err := json.Marshal(res)
	require.NoError(t, err)
	fmt.Println("fq " + string(b))
}

// paced sends through next at the pace of lim: the oracle, a plain client
// that knows its share of the quota.
type paced struct {
	next http.RoundTripper
	lim  *rate.Limiter
}

func (p paced) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := p.lim.Wait(req.Context()); err != nil {
		return nil, err
	}
	return p.next.RoundTrip(req)
}
