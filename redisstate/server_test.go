package redisstate

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/retryhttp/retryhttp/fleet"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	var opts []goleak.Option
	if os.Getenv(fqChildEnv) != "" {
		// A process of TestFleetQuota's round whose store died ends with
		// go-redis still waiting to dial it again: a goroutine that sleeps
		// a second and ends, which the process does not wait for.
		opts = append(opts, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
	}
	goleak.VerifyTestMain(m, opts...)
}

// redisServer is a redis-server that a test starts and owns, on a free port
// of 127.0.0.1, keeping nothing on disk. It is stopped when the test ends.
type redisServer struct {
	t     testing.TB
	bin   string
	dir   string
	port  int
	extra []string // further arguments of redis-server

	mu  sync.Mutex
	cmd *exec.Cmd // guarded by mu
}

// startRedis starts a redis-server for t, with the extra arguments given.
// Without one on PATH the test fails when CI=true, and is skipped
// otherwise.
func startRedis(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		const how = "redis-server not found on PATH (apt-get install -y --no-install-recommends redis-server)"
		if os.Getenv("CI") == "true" {
			t.Fatal(how)
		}
		t.Skip(how + "; skipped outside CI")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &redisServer{t: t, bin: bin, dir: t.TempDir(), port: port, extra: extra}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *redisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// start runs the server and waits until it answers PING.
func (s *redisServer) start() {
	s.t.Helper()
	cmd := exec.Command(s.bin, append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir}, s.extra...)...)
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if s.ping() {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s did not answer within 10 s", s.Addr())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ping reports whether the server answers PING within 200 ms.
func (s *redisServer) ping() bool {
	line, err := s.do("PING")
	return err == nil && line == "+PONG"
}

// do sends one inline command and returns the first line of the reply,
// within 200 ms.
func (s *redisServer) do(command string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Write([]byte(command + "\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if strings.HasPrefix(line, "$") { // a bulk string: its first line
		line, err = r.ReadString('\n')
		line = strings.TrimSuffix(line, "\r\n")
	}
	return line, err
}

// startCluster starts a redis-server for t as a Redis Cluster of one node
// that serves every slot, and waits until the cluster is up.
func startCluster(t testing.TB) *redisServer {
	t.Helper()
	s := startRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	if line, err := s.do("CLUSTER ADDSLOTSRANGE 0 16383"); err != nil || line != "+OK" {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %q, %v", line, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if info, err := s.do("CLUSTER INFO"); err == nil && info == "cluster_state:ok" {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatal("the cluster did not come up within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *redisServer) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatal(err)
	}
}

// Pause stops the server with SIGSTOP; Resume continues it.
func (s *redisServer) Pause()  { s.signal(syscall.SIGSTOP) }
func (s *redisServer) Resume() { s.signal(syscall.SIGCONT) }

// Kill kills the server and waits for it to exit.
func (s *redisServer) Kill() {
	s.t.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// Restart starts the server again on the same port.
func (s *redisServer) Restart() {
	s.t.Helper()
	s.start()
}

func (s *redisServer) stop() { s.Kill() }

// client returns a go-redis client of the server, closed when the test
// ends.
func (s *redisServer) client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: s.Addr(),
		// Redis 7.0 knows nothing of these: skip the handshakes.
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// prefix returns a key prefix of the test's own.
func prefix(t testing.TB) string {
	return fmt.Sprintf("test:%s:", t.Name())
}

// watcher runs Watch on a store until the test ends, recording each change
// it applies and when.
type watcher struct {
	mu      sync.Mutex
	changes []received // guarded by mu
	notify  chan struct{}
	snaps   chan struct{}
	done    chan struct{}
}

type received struct {
	c  fleet.Change
	at time.Time
}

func startWatcher(t testing.TB, s *Store) *watcher {
	t.Helper()
	w := &watcher{notify: make(chan struct{}, 1), snaps: make(chan struct{}, 16), done: make(chan struct{})}
	s.onSnapshot = func() {
		select {
		case w.snaps <- struct{}{}:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(w.done)
		_ = s.Watch(ctx, func(c fleet.Change) {
			w.mu.Lock()
			w.changes = append(w.changes, received{c, time.Now()})
			w.mu.Unlock()
			select {
			case w.notify <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
	})
	return w
}

// waitSnapshot waits up to d for the watcher's next snapshot.
func (w *watcher) waitSnapshot(t testing.TB, d time.Duration) bool {
	t.Helper()
	select {
	case <-w.snaps:
		return true
	case <-time.After(d):
		return false
	}
}

// waitFor waits up to d for a change that match accepts, and returns it.
func (w *watcher) waitFor(d time.Duration, match func(fleet.Change) bool) (received, bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	seen := 0
	for {
		w.mu.Lock()
		for ; seen < len(w.changes); seen++ {
			if match(w.changes[seen].c) {
				r := w.changes[seen]
				w.mu.Unlock()
				return r, true
			}
		}
		w.mu.Unlock()
		select {
		case <-w.notify:
		case <-deadline.C:
			return received{}, false
		}
	}
}
