package attempt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Absent tells the errors of a host that is not there from those a host
// sending too much away also gives: both never reached it.
func TestAbsent(t *testing.T) {
	dial := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)}
	}
	for _, c := range []struct {
		name   string
		err    error
		absent bool
	}{
		{"refused", dial(syscall.ECONNREFUSED), true},
		{"no route to the host", dial(syscall.EHOSTUNREACH), true},
		{"network unreachable", dial(syscall.ENETUNREACH), true},
		{"name not found", &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}}, true},
		{"graceful GOAWAY", fmt.Errorf("wrapped: %w", errors.New(h2GoAwayGraceful)), true},
		{"dial timed out", &net.OpError{Op: "dial", Net: "tcp", Err: context.DeadlineExceeded}, false},
		{"name server failed", &net.OpError{Op: "dial", Err: &net.DNSError{Err: "server misbehaving", IsTemporary: true}}, false},
		{"GOAWAY with an error code", errors.New(h2GoAwayFirst + " ENHANCE_YOUR_CALM"), false},
		{"refused stream", h2StreamError{StreamID: 1, Code: h2RefusedStream}, false},
		{"reset after writing", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, false},
	} {
		assert.Equal(t, c.absent, Absent(c.err), c.name)
	}
}
