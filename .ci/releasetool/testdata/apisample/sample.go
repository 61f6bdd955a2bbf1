// Package sample holds one declaration of each kind that the API listing
// must show, and some that it must not.
package sample

import (
	"context"
	"errors"
	"io"
	"time"
)

const Untyped = "x"

const Timeout time.Duration = 2 * time.Second

type Kind int

const (
	KindA Kind = iota
	KindB
)

func (k Kind) String() string { return "" }

var ErrX = errors.New("x")

type Option func(*config)

type config struct{}

func New(r io.Reader, opts ...Option) (*T, error) { return nil, nil }

type T struct {
	Name   string `json:"name"`
	hidden int
	*Embedded
	io.Reader
}

func (T) Value()                             {}
func (*T) Pointer(ctx context.Context) error { return nil }
func (*T) private()                          {}

type Embedded struct{ X int }

func (e *Embedded) Promoted() int { return 0 }

type Iface interface {
	io.Closer
	Do(n int) string
}

type Sealed interface {
	Exported()
	private()
}

type Number interface{ ~int | ~float64 }

func Sum[N Number](xs ...N) N { return 0 }

func Ordered[S ~[]E, E interface{ ~int | ~string }](s S) E { var e E; return e }

type Pair[K comparable, V any] struct {
	Key K
	Val V
}

func (p Pair[K, V]) String() string { return "" }

type Alias = T

func Chans(chan<- int, <-chan string, chan (<-chan int)) {}

func Anon(struct{ A int }, func(x int) (y string)) map[string][]*T { return nil }

func helper() {}
