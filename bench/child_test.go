package bench

import (
	"bytes"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// child is a server process that a test owns (nginx, toxiproxy): started
// with its output captured, waited for by one goroutine, and stopped when
// the test ends.
type child struct {
	name string
	proc *os.Process
	done chan struct{} // closed when the process has exited
	err  error         // the process's exit; read after done
	out  *lockedBuffer // its stdout and stderr
}

// startChild starts cmd, named name in messages, with its stdout and
// stderr in out; on Linux it dies with the test binary. It is stopped when
// the test ends.
func startChild(t *testing.T, name string, cmd *exec.Cmd) *child {
	c := &child{name: name, done: make(chan struct{}), out: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = c.out, c.out
	cmd.SysProcAttr = childProcAttr()
	require.NoError(t, cmd.Start())
	c.proc = cmd.Process
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() { c.stop(t) })
	return c
}

// stop ends the process (SIGTERM, then SIGKILL if it has not exited within
// 5 s) and waits for it.
func (c *child) stop(t *testing.T) {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.proc.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		t.Errorf("%s did not exit within 5 s of SIGTERM; killing it\n%s", c.name, c.out.String())
		_ = c.proc.Kill()
		<-c.done
	}
}

// lockedBuffer is a child's output, written by the process's copying
// goroutines and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
