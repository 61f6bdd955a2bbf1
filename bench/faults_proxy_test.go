package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// toxiproxyPkg is the server that bench/go.mod keeps as a tool, so that its
// version and checksums are pinned beside the module's other dependencies.
const toxiproxyPkg = "github.com/Shopify/toxiproxy/v2/cmd/server"

// toxiproxy is a running toxiproxy server that the test owns: a child
// process whose HTTP API listens on 127.0.0.1, driven with plain net/http.
type toxiproxy struct {
	*child
	api  string // http://127.0.0.1:port
	http *http.Transport
}

// buildToxiproxy builds the server from the module's tool directive into
// dir and returns the binary's path. The build runs in the bench module
// (the test's working directory), so it uses go.mod's version and go.sum's
// checksums, and the build cache makes every build after the first a link.
func buildToxiproxy(t *testing.T, dir string) string {
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command builds the toxiproxy server")
	bin := filepath.Join(dir, "toxiproxy-server")
	start := time.Now()
	cmd := exec.Command(goBin, "build", "-o", bin, toxiproxyPkg)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s:\n%s", toxiproxyPkg, out)
	t.Logf("built %s in %.1f s", toxiproxyPkg, time.Since(start).Seconds())
	return bin
}

// startToxiproxy starts the server on a free port of 127.0.0.1 and stops it
// when the test ends. A port taken between choosing it and the server
// binding it is retried, a few times: the server logs the failure and
// keeps running without an API, so its output tells.
func startToxiproxy(t *testing.T, bin string) *toxiproxy {
	for try := 1; ; try++ {
		port := freePort(t)
		cmd := exec.Command(bin, "-host", "127.0.0.1", "-port", strconv.Itoa(port))
		// Warnings and errors only: at info it logs two lines per
		// connection, thousands in the black-hole burst.
		cmd.Env = append(os.Environ(), "LOG_LEVEL=warn")
		p := &toxiproxy{api: fmt.Sprintf("http://127.0.0.1:%d", port), http: &http.Transport{}}
		t.Cleanup(p.http.CloseIdleConnections) // runs after the stop that startChild registers next
		p.child = startChild(t, "toxiproxy", cmd)
		err := p.ready()
		if err == nil {
			return p
		}
		if try < 3 && strings.Contains(p.out.String(), "address already in use") {
			t.Logf("port %d taken, trying another: %s", port, p.out.String())
			p.stop(t)
			continue
		}
		t.Fatalf("toxiproxy did not start: %v\n%s", err, p.out.String())
	}
}

// ready waits, at most 10 s, until the API answers GET /version; it gives
// up at once if the server has exited or failed to listen.
func (p *toxiproxy) ready() error {
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := p.call(http.MethodGet, "/version", nil, nil)
		if err == nil {
			return nil
		}
		if strings.Contains(p.out.String(), "address already in use") {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("API not answering after 10 s: %w", err)
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited: %v", p.err)
		case <-tick.C:
		}
	}
}

// call sends one API request with a JSON body (nil: none) and decodes a
// JSON answer into out (nil: discarded). A status of 300 or more is an
// error carrying the server's message.
func (p *toxiproxy) call(method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.api+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.http.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// proxy is one of the server's proxies: it listens on addr and forwards to
// its upstream through the toxics added to it.
type proxy struct {
	tp   *toxiproxy
	name string
	addr string // host:port it listens on
}

// newProxy creates a proxy from a free port of 127.0.0.1 (the server binds
// port 0 and reports the port) to upstream, and deletes it when the test
// ends, which closes every connection through it.
func (p *toxiproxy) newProxy(t *testing.T, name, upstream string) *proxy {
	var got struct {
		Listen string `json:"listen"`
	}
	in := map[string]any{"name": name, "listen": "127.0.0.1:0", "upstream": upstream, "enabled": true}
	require.NoError(t, p.call(http.MethodPost, "/proxies", in, &got))
	host, _, err := net.SplitHostPort(got.Listen)
	require.NoError(t, err, "the proxy's listen address %q", got.Listen)
	require.Equal(t, "127.0.0.1", host, "the proxy listens on loopback")
	t.Cleanup(func() {
		if err := p.call(http.MethodDelete, "/proxies/"+name, nil, nil); err != nil {
			t.Errorf("deleting proxy %s: %v", name, err)
		}
	})
	return &proxy{tp: p, name: name, addr: got.Listen}
}

// url is the proxy's address as a URL with the path.
func (x *proxy) url(path string) string { return "http://" + x.addr + path }

// addToxic adds a toxic of the type to every connection, current and new,
// in the stream's direction: "downstream" (the upstream's answer to the
// client) or "upstream" (the client's request to the upstream).
func (x *proxy) addToxic(t *testing.T, name, typ, stream string, attrs map[string]any) {
	in := map[string]any{"name": name, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs}
	require.NoError(t, x.tp.call(http.MethodPost, "/proxies/"+x.name+"/toxics", in, nil))
}

// removeToxic removes the toxic from every connection through the proxy.
// It returns the error rather than failing the test, so that a hook may
// call it from a request's goroutine.
func (x *proxy) removeToxic(name string) error {
	return x.tp.call(http.MethodDelete, "/proxies/"+x.name+"/toxics/"+name, nil, nil)
}
