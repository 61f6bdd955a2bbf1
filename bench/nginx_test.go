package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// nginxConf is the test's nginx: one process (master_process off: the
// child the test starts is all of nginx, so killing it leaves no worker
// behind, and no worker switches to another user who could not read the
// test's temporary directory), every path under the prefix, and limit_req
// rejecting with 429 at once beyond rate and burst (nodelay: excess
// requests within the burst are served at once, not queued, as a token
// bucket does; without it nginx would delay them itself and pace the
// client on its behalf). Rejections are logged at info, below the error
// log's level. The access log records each answer's status.
const nginxConf = `# Written by TestNginxThrottled; relative paths are under the prefix (-p).
master_process off;
pid nginx.pid;
lock_file nginx.lock;
error_log logs/error.log warn;
events {
    worker_connections 4096;
}
http {
    log_format status '$status';
    access_log logs/access.log status;
    client_body_temp_path tmp/client_body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
    default_type text/plain;
    limit_req_zone $binary_remote_addr zone=batch:1m rate=%dr/s;
    limit_req_status 429;
    limit_req_log_level info;
    server {
        listen 127.0.0.1:%d;
        root html;
        location / {
            limit_req zone=batch burst=%d nodelay;
        }
    }
}
`

// nginx is a running nginx that the test owns.
type nginx struct {
	*child
	url    string // the tiny 200 response
	prefix string
}

// findNginx returns the nginx binary: on PATH, or Debian's /usr/sbin/nginx
// (not on a normal user's PATH). Without one the test fails when CI=true
// and is skipped otherwise.
func findNginx(t *testing.T) string {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if st, err := os.Stat("/usr/sbin/nginx"); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return "/usr/sbin/nginx"
	}
	const msg = "nginx not found (on PATH or /usr/sbin/nginx): apt-get install -y --no-install-recommends nginx-light"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// startNginx starts nginx on a free port of 127.0.0.1, limiting requests
// to perSec with the burst, and stops it when the test ends. A port taken
// between choosing it and nginx binding it is retried, a few times.
func startNginx(t *testing.T, bin string, perSec, burst int) *nginx {
	prefix := t.TempDir()
	for _, d := range []string{"logs", "html", "tmp"} {
		require.NoError(t, os.Mkdir(filepath.Join(prefix, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(prefix, "html", "ok.txt"), []byte("ok\n"), 0o644))
	conf := filepath.Join(prefix, "nginx.conf")
	for try := 1; ; try++ {
		port := freePort(t)
		require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, nginxConf, perSec, port, burst), 0o644))
		cmd := exec.Command(bin, "-c", conf, "-p", prefix+"/", "-g", "daemon off;")
		n := &nginx{child: startChild(t, "nginx", cmd), url: fmt.Sprintf("http://127.0.0.1:%d/ok.txt", port), prefix: prefix}
		err := n.ready(port)
		if err == nil {
			return n
		}
		log := n.out.String() + readFile(filepath.Join(prefix, "logs", "error.log"))
		if try < 3 && strings.Contains(log, "Address already in use") {
			t.Logf("port %d taken, trying another: %s", port, log)
			continue
		}
		t.Fatalf("nginx did not start: %v\n%s", err, log)
	}
}

// ready waits, at most 10 s, until nginx accepts connections on the port
// and answers 200; it gives up at once if nginx has exited.
func (n *nginx) ready(port int) error {
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening after 10 s: %w", err)
		}
		select {
		case <-n.done:
			return fmt.Errorf("exited: %v", n.err)
		case <-tick.C:
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.url, nil)
	if err != nil {
		return err
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		return fmt.Errorf("GET %s: %s %q", n.url, resp.Status, body)
	}
	return nil
}

// statuses counts the access log's statuses; call it after nginx exited,
// when every line is written.
func (n *nginx) statuses(t *testing.T) map[int]int {
	f, err := os.Open(filepath.Join(n.prefix, "logs", "access.log"))
	require.NoError(t, err)
	defer f.Close()
	counts := map[int]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		code, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		require.NoError(t, err, "access log line %q", sc.Text())
		counts[code]++
	}
	require.NoError(t, sc.Err())
	return counts
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}

// freePort returns a port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestNginxThrottled sends a batch of 5,000 GETs from 200 workers to a real
// nginx that admits 500 requests/s (limit_req, burst 50, nodelay, 429
// beyond), through retryhttp with its defaults (the batch requeues a
// failed request at RetryAt's instant) and through a plain client paced at
// 480/s. retryhttp delivers at least 99% of the batch, within 1.25x the
// paced client's time, with 429s at most 5% of its attempts. With
// -args -table, retryhttp without budget and breaker and both peers (10
// attempts, full jitter) run too, and the table is logged. nginx's access
// log must count what the clients saw.
func TestNginxThrottled(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first, so it runs after nginx has been stopped
	bin := findNginx(t)
	const (
		requests, workers = 5_000, 200
		rate, burst       = 500, 50
		pacedAt           = 480
	)
	n := startNginx(t, bin, rate, burst)
	c := BatchConfig{Requests: requests, Workers: workers, Horizon: 60 * time.Second}

	defaults, _ := ThrottledClientByKey("retryhttp")
	clients := []BatchClient{defaults}
	if *table {
		for _, k := range []string{"retryhttp-jitter", "retryablehttp", "failsafe"} {
			cl, _ := ThrottledClientByKey(k)
			clients = append(clients, cl)
		}
	}
	clients = append(clients, PacedClient(pacedAt))
	var results []BatchResult
	for _, cl := range clients {
		base := NewBatchBase(workers)
		r := RunBatch(cl, base, n.url, c)
		base.CloseIdleConnections()
		t.Logf("%s: delivered %d of %d in %.2f s; %d attempts, %d answered 429 (%.1f%%), %d other, %d errors; %d calls, %d returned an error; peak %.0f req/s; advice %s",
			r.Client, r.Delivered, r.Requests, r.Done.Seconds(), r.Attempts, r.Throttled, 100*float64(r.Throttled)/float64(max(r.Attempts, 1)),
			r.Other, r.Errors, r.Passes, r.CallErrors, r.PeakRPS, adviceString(r.Advice))
		if r.ErrSample != "" {
			t.Logf("%s: an error: %s", r.Client, r.ErrSample)
		}
		results = append(results, r)
	}
	t.Logf("nginx limit_req %d r/s, burst %d, nodelay; %d GETs from %d workers, %s:\n%s", rate, burst, requests, workers,
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), nginxMarkdown(results))

	// nginx's own count of what it answered, once it has exited.
	var ok, throttled int
	for _, r := range results {
		ok += r.OK
		throttled += r.Throttled
	}
	n.stop(t)
	require.NoError(t, ignoreSignal(n.err), "nginx's exit:\n%s", n.out.String())
	counts := n.statuses(t)
	assert.Equal(t, ok+1, counts[http.StatusOK], "200s in nginx's access log: the batches' and the readiness check's")
	assert.Equal(t, throttled, counts[http.StatusTooManyRequests], "429s in nginx's access log")

	got, paced := results[0], results[len(results)-1]
	require.Equal(t, requests, paced.Delivered, "the paced client delivers the batch")
	assert.Zero(t, paced.Throttled, "the paced client stays under nginx's limit")
	assert.GreaterOrEqual(t, got.Delivered, requests*99/100, "retryhttp delivers at least 99%%")
	assert.LessOrEqual(t, got.Done.Seconds(), 1.25*paced.Done.Seconds(), "retryhttp within 1.25x the paced client's %.2f s", paced.Done.Seconds())
	assert.LessOrEqual(t, float64(got.Throttled), 0.05*float64(got.Attempts), "429s at most 5%% of retryhttp's attempts")
}

// nginxMarkdown is the table of TestNginxThrottled.
func nginxMarkdown(rs []BatchResult) string {
	var b strings.Builder
	b.WriteString("| client | delivered | finished | 429s per delivered |\n|---|--:|--:|--:|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %d of %d | %.2f s | %.3f |\n", nginxName(r.Client), r.Delivered, r.Requests, r.Done.Seconds(), r.ThrottledPerDelivered())
	}
	return b.String()
}

// nginxName is a client's name in the nginx table.
func nginxName(name string) string {
	switch name {
	case "retryhttp defaults (adaptive rate)":
		return "retryhttp defaults"
	case "retryhttp, full jitter alone (adaptive rate, budget, breaker off)":
		return "retryhttp, budget and breaker off, 10 attempts"
	case "go-retryablehttp, full jitter":
		return "go-retryablehttp, 10 attempts"
	case "failsafe-go, full jitter (DelayFunc)":
		return "failsafe-go, 10 attempts"
	}
	return name
}

// ignoreSignal treats an exit by SIGTERM as clean: nginx without a master
// process may be ended by the signal rather than exit by itself.
func ignoreSignal(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			return nil
		}
	}
	return err
}
