package bench

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// BacklogConfig is a server of fixed capacity: Workers workers, each
// serving one request at a time, take requests in arrival order from one
// queue in front of them.
type BacklogConfig struct {
	// Workers serve at once. 0 means 32.
	Workers int
	// Service is the time a worker spends on each request. 0 means 20 ms
	// (with 32 workers, 1,600 requests/s).
	Service time.Duration
	// Slowdown multiplies Service for a request whose service starts
	// within the trigger, [From, To) from the server's start: the capacity
	// is cut to 1/Slowdown. 0 means 5.
	Slowdown int
	From, To time.Duration
	// QueueMax bounds the queue, so that memory is bounded: a request
	// that finds it full is answered 503 at once. 0 means 10,000.
	QueueMax int
	// ServiceOf, if set, draws each request's service time, in the order
	// the workers take requests, in place of Service and the trigger.
	ServiceOf func() time.Duration
}

func (c BacklogConfig) withDefaults() BacklogConfig {
	if c.Workers <= 0 {
		c.Workers = 32
	}
	if c.Service <= 0 {
		c.Service = 20 * time.Millisecond
	}
	if c.Slowdown <= 0 {
		c.Slowdown = 5
	}
	if c.QueueMax <= 0 {
		c.QueueMax = 10_000
	}
	return c
}

// Capacity returns the requests a second the workers serve outside the
// trigger.
func (c BacklogConfig) Capacity() float64 {
	c = c.withDefaults()
	return float64(c.Workers) / c.Service.Seconds()
}

// Backlog is the server of BacklogConfig. It serves abandoned requests: a
// request whose client has gone (its attempt timed out, its caller gave
// up) stays in the queue, and a worker spends its service time on it when
// its turn comes, as a server that never checks for cancellation does. So
// the queue remembers every attempt a client ever sent, and a client that
// retries what timed out keeps it full after the trigger has passed.
// Backlog is safe for concurrent use; Close stops its workers.
type Backlog struct {
	c     BacklogConfig
	start time.Time
	queue chan *backlogJob
	stop  chan struct{}
	wg    sync.WaitGroup

	received, rejected, served, servedGone atomic.Int64
	peakQueue                              atomic.Int64
}

// backlogJob is one request in the queue: gone ends when its handler has
// returned or its client has gone; done is closed once it has been served.
type backlogJob struct {
	gone <-chan struct{}
	done chan struct{}
}

// NewBacklog starts the workers of a Backlog whose trigger is timed from
// start.
func NewBacklog(c BacklogConfig, start time.Time) *Backlog {
	c = c.withDefaults()
	b := &Backlog{
		c:     c,
		start: start,
		queue: make(chan *backlogJob, c.QueueMax),
		stop:  make(chan struct{}),
	}
	for range c.Workers {
		b.wg.Go(b.work)
	}
	return b
}

func (b *Backlog) work() {
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		var j *backlogJob
		select {
		case <-b.stop:
			return
		case j = <-b.queue:
		}
		gone := false
		select {
		case <-j.gone:
			gone = true
		default:
		}
		d := b.c.Service
		if at := time.Since(b.start); b.c.ServiceOf != nil {
			d = b.c.ServiceOf()
		} else if at >= b.c.From && at < b.c.To {
			d *= time.Duration(b.c.Slowdown)
		}
		// The service itself: the worker is busy for d whoever waits.
		t.Reset(d)
		select {
		case <-b.stop:
			t.Stop()
			return
		case <-t.C:
		}
		b.served.Add(1)
		if gone {
			b.servedGone.Add(1)
		}
		close(j.done)
	}
}

func (b *Backlog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.received.Add(1)
	j := &backlogJob{gone: r.Context().Done(), done: make(chan struct{})}
	select {
	case b.queue <- j:
		storeMax(&b.peakQueue, int64(len(b.queue)))
	default:
		// Full: memory stays bounded, and the client learns at once.
		b.rejected.Add(1)
		http.Error(w, "queue full", http.StatusServiceUnavailable)
		return
	}
	select {
	case <-j.done:
		_, _ = io.WriteString(w, "ok\n")
	case <-r.Context().Done():
		// The client has gone; the job stays queued and will be served.
	case <-b.stop:
	}
}

// Queued returns the requests waiting for a worker now.
func (b *Backlog) Queued() int { return len(b.queue) }

// BacklogCounts are a Backlog's own counts.
type BacklogCounts struct {
	Received   int // requests that reached the handler
	Rejected   int // answered 503 because the queue was full
	Served     int // given a worker's service time
	ServedGone int // of which the client had gone before its service began
	PeakQueue  int // longest queue seen by an arriving request
}

// Counts returns the server's counts so far.
func (b *Backlog) Counts() BacklogCounts {
	return BacklogCounts{
		Received:   int(b.received.Load()),
		Rejected:   int(b.rejected.Load()),
		Served:     int(b.served.Load()),
		ServedGone: int(b.servedGone.Load()),
		PeakQueue:  int(b.peakQueue.Load()),
	}
}

// Close stops the workers, dropping what is still queued, and returns
// once they have stopped; waiting handlers return at once.
func (b *Backlog) Close() {
	close(b.stop)
	b.wg.Wait()
}
