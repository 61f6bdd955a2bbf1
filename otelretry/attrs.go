package otelretry

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/retryhttp/retryhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// The attribute keys of this package; the others are semconv's.
const (
	retryKey      = attribute.Key("retryhttp.retry")
	retryAfterKey = attribute.Key("retryhttp.retry_after")
	clampedKey    = attribute.Key("retryhttp.clamped")
	// quotaExhaustedKey: a policy of the advertised quota had nothing
	// left, and the key was held until its reset.
	quotaExhaustedKey = attribute.Key("retryhttp.quota.exhausted")
	reasonKey         = attribute.Key("retryhttp.reason")
	fromKey           = attribute.Key("retryhttp.circuit.from")
	toKey             = attribute.Key("retryhttp.circuit.to")
	causeKey          = attribute.Key("retryhttp.cause")
	releasedKey       = attribute.Key("retryhttp.released")
	hedgeKey          = attribute.Key("retryhttp.hedge")
)

// attrKey is the comparable key of one instrument's attributes, less the
// host. Every key type takes a bounded number of values (normalised
// methods, three-digit status codes, Go error types, reasons, capped retry
// numbers, states), so a cache of them stays small.
type attrKey interface {
	comparable
	attrs() []attribute.KeyValue
}

type attemptKey struct {
	method  string
	status  int    // 0 with an error
	errType string // "" with a response
	hedge   bool   // a hedge (retryhttp.WithHedging)
}

func (k attemptKey) attrs() []attribute.KeyValue {
	a := append([]attribute.KeyValue{semconv.HTTPRequestMethodKey.String(k.method)}, outcome(k.status, k.errType))
	if k.hedge {
		a = append(a, hedgeKey.Bool(true))
	}
	return a
}

type methodKey string

func (k methodKey) attrs() []attribute.KeyValue {
	return []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(string(k))}
}

type delayKey struct {
	retry      int
	retryAfter bool
}

func (k delayKey) attrs() []attribute.KeyValue {
	return []attribute.KeyValue{retryKey.Int(k.retry), retryAfterKey.Bool(k.retryAfter)}
}

type clampKey bool

type exhaustedKey bool

func (k exhaustedKey) attrs() []attribute.KeyValue {
	return []attribute.KeyValue{quotaExhaustedKey.Bool(bool(k))}
}

func (k clampKey) attrs() []attribute.KeyValue {
	return []attribute.KeyValue{clampedKey.Bool(bool(k))}
}

type giveUpKey struct {
	method  string
	reason  retryhttp.Reason
	status  int    // 0 with an error
	errType string // "" with a response
}

func (k giveUpKey) attrs() []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.HTTPRequestMethodKey.String(k.method),
		reasonKey.String(k.reason.String()),
		outcome(k.status, k.errType),
	}
}

type circuitKey struct {
	from, to retryhttp.State
}

func (k circuitKey) attrs() []attribute.KeyValue {
	return []attribute.KeyValue{fromKey.String(k.from.String()), toKey.String(k.to.String())}
}

type waitKey struct {
	cause    retryhttp.Reason
	released bool
}

func (k waitKey) attrs() []attribute.KeyValue {
	return []attribute.KeyValue{causeKey.String(k.cause.String()), releasedKey.Bool(k.released)}
}

// noKey is the key of an instrument with no attributes but the host.
type noKey struct{}

func (noKey) attrs() []attribute.KeyValue { return nil }

// outcome is the attribute that names how an attempt ended.
func outcome(status int, errType string) attribute.KeyValue {
	if errType != "" {
		return semconv.ErrorTypeKey.String(errType)
	}
	return semconv.HTTPResponseStatusCodeKey.Int(status)
}

// measure is the options of one attribute set, as the variadic arguments of
// Add and Record, so that passing them allocates no slice.
type measure struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

func newMeasure(attrs []attribute.KeyValue) measure {
	o := metric.WithAttributeSet(attribute.NewSet(attrs...))
	return measure{add: []metric.AddOption{o}, record: []metric.RecordOption{o}}
}

// setCache holds the options of each key recorded so far, so that recording
// again builds and sorts no attribute set and allocates nothing. The map
// only grows, and is bounded because its keys are (see attrKey). It is safe
// for concurrent use; the zero value is empty and ready.
type setCache[K attrKey] struct {
	mu sync.RWMutex
	m  map[K]measure // guarded by mu
}

// get returns the options for k plus host. With host attributes, which are
// unbounded, it builds the set afresh and caches nothing.
func (c *setCache[K]) get(k K, host []attribute.KeyValue) measure {
	if len(host) > 0 {
		return newMeasure(append(k.attrs(), host...))
	}
	c.mu.RLock()
	o, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return o
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if o, ok := c.m[k]; ok {
		return o // another goroutine stored it first
	}
	if c.m == nil {
		c.m = make(map[K]measure)
	}
	o = newMeasure(k.attrs())
	c.m[k] = o
	return o
}

// method returns the request's method as http.request.method records it:
// GET for the empty method, the method itself if RFC 9110 or RFC 5789
// defines it, and "_OTHER" for anything else, which a caller could otherwise
// use to make any number of series.
func method(req *http.Request) string {
	switch m := req.Method; m {
	case "":
		return http.MethodGet
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodDelete, http.MethodConnect, http.MethodOptions,
		http.MethodTrace, http.MethodPatch:
		return m
	}
	return "_OTHER"
}

// errorType returns the error.type of an attempt's or a request's error.
// The common causes get a word of their own because their Go types say
// little (context.Canceled is an *errors.errorString); the rest are known by
// their Go type, which is bounded by the program, never by their message.
func errorType(err error) string {
	var re *retryhttp.Error
	if errors.As(err, &re) {
		// The transport's own wrapper, on every error it returns: the cause
		// is what tells errors apart.
		err = re.Err
	}
	var timeout interface{ Timeout() bool }
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &timeout) && timeout.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, retryhttp.ErrCircuitOpen):
		return "circuit_open"
	}
	return semconv.ErrorType(err).Value.AsString()
}

// urlHostAttrs returns server.address, the URL's host name in lower case,
// and server.port, its port or the scheme's default.
func urlHostAttrs(u *url.URL) []attribute.KeyValue {
	attrs := []attribute.KeyValue{semconv.ServerAddressKey.String(strings.ToLower(u.Hostname()))}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		// No port in the URL: the scheme's, as the transport would dial.
		switch u.Scheme {
		case "http":
			port = 80
		case "https":
			port = 443
		default:
			return attrs
		}
	}
	return append(attrs, semconv.ServerPortKey.Int(port))
}

// hostAttrs returns the host attributes of a circuit's host, which
// Event gives as scheme://host[:port], so that a circuit's
// measurements carry the same attributes as its requests'.
func hostAttrs(host string) []attribute.KeyValue {
	u, err := url.Parse(host)
	if err != nil {
		return []attribute.KeyValue{semconv.ServerAddressKey.String(host)}
	}
	return urlHostAttrs(u)
}
