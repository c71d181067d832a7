package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats-server/v2/server"
)

// This file is the harness of the scale and fault suites: NATS servers
// started in the test process (one node, or a cluster of three routed on
// loopback ports) that can be stopped and started again on the same ports
// and store, and real gated processes that can be SIGKILLed and
// restarted.

// freePort returns a loopback port nobody listens on right now and that
// no other test of this binary was given. The port is reused across
// restarts, so it is chosen once per node or process.
func freePort(t *testing.T) int {
	t.Helper()
	return natstest.FreePort(t)
}

// natsNode is one nats-server of a natsCluster. Its ports and store
// directory stay the same across restarts.
type natsNode struct {
	name        string
	clientPort  int
	clusterPort int
	storeDir    string
	srv         *server.Server // nil while the node is stopped
}

// natsCluster is a set of nats-servers with JetStream, run in the test
// process. With one node there is no cluster block; with more, every node
// routes to every other over loopback.
type natsCluster struct {
	t     *testing.T
	nodes []*natsNode
	logs  *syncBuffer
}

// startNATS starts n nats-servers with JetStream and waits until
// JetStream is usable: on a cluster, until there is a meta leader and
// every node is current. The servers are shut down when the test ends.
func startNATS(t *testing.T, n int) *natsCluster {
	t.Helper()
	c := &natsCluster{t: t, logs: &syncBuffer{}}
	for i := range n {
		node := &natsNode{
			name:       fmt.Sprintf("n%d", i+1),
			clientPort: freePort(t),
			storeDir:   filepath.Join(t.TempDir(), fmt.Sprintf("n%d", i+1)),
		}
		if n > 1 {
			node.clusterPort = freePort(t)
		}
		c.nodes = append(c.nodes, node)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.stop(i)
		}
		if t.Failed() {
			t.Logf("nats-server logs (last lines):\n%s", lastLines(c.logs.String(), 200))
		}
	})
	// A cluster node waits for its routes before it is ready for clients,
	// so the nodes start together.
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range c.nodes {
		wg.Go(func() { errs[i] = c.launch(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	c.waitJetStream(t)
	return c
}

func (c *natsCluster) options(node *natsNode) *server.Options {
	o := &server.Options{
		ServerName:         node.name,
		Host:               "127.0.0.1",
		Port:               node.clientPort,
		JetStream:          true,
		StoreDir:           node.storeDir,
		JetStreamMaxMemory: 64 << 20,
		JetStreamMaxStore:  1 << 30,
		NoSigs:             true,
	}
	if len(c.nodes) > 1 {
		var routes []string
		for _, other := range c.nodes {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", other.clusterPort))
		}
		o.Cluster = server.ClusterOpts{Name: "gated-test", Host: "127.0.0.1", Port: node.clusterPort}
		o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
	}
	return o
}

// launch starts node i on its ports and store.
func (c *natsCluster) launch(i int) error {
	node := c.nodes[i]
	srv, err := server.NewServer(c.options(node))
	if err != nil {
		return fmt.Errorf("configuring nats-server %s: %w", node.name, err)
	}
	srv.SetLoggerV2(nodeLogger{name: node.name, w: c.logs}, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("nats-server %s not ready for clients on port %d within 30s", node.name, node.clientPort)
	}
	node.srv = srv
	return nil
}

// stop shuts node i down, as abruptly as an in-process server allows:
// client and route connections drop at once.
func (c *natsCluster) stop(i int) {
	node := c.nodes[i]
	if node.srv == nil {
		return
	}
	node.srv.Shutdown()
	node.srv.WaitForShutdown()
	node.srv = nil
}

// restart starts a stopped node i again on the same ports and store and
// waits until JetStream is usable again.
func (c *natsCluster) restart(t *testing.T, i int) {
	t.Helper()
	if err := c.launch(i); err != nil {
		t.Fatal(err)
	}
	c.waitJetStream(t)
}

// url lists the client URLs of every node, comma-separated, as
// --nats-url takes them.
func (c *natsCluster) url() string {
	var urls []string
	for _, n := range c.nodes {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", n.clientPort))
	}
	return strings.Join(urls, ",")
}

// waitJetStream waits until every running node has JetStream and, on a
// cluster, routes to every other running node, a meta leader is elected
// and every running node is current.
func (c *natsCluster) waitJetStream(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		running := 0
		for _, n := range c.nodes {
			if n.srv != nil {
				running++
			}
		}
		leader, current, routed := false, true, true
		for _, n := range c.nodes {
			if n.srv == nil {
				continue
			}
			routed = routed && n.srv.NumRemotes() == running-1
			if !n.srv.JetStreamEnabled() {
				current = false
				continue
			}
			leader = leader || n.srv.JetStreamIsLeader() || len(c.nodes) == 1
			current = current && n.srv.JetStreamIsCurrent()
		}
		if leader && current && routed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream not ready after 60s (meta leader: %v, all nodes current: %v, fully routed: %v)", leader, current, routed)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// streamLeader returns the index of the node that leads stream, or -1.
func (c *natsCluster) streamLeader(stream string) int {
	for i, n := range c.nodes {
		if n.srv != nil && n.srv.GlobalAccount().JetStreamIsStreamLeader(stream) {
			return i
		}
	}
	return -1
}

// nodeLogger keeps a node's notices, warnings and errors for the failure
// report.
type nodeLogger struct {
	name string
	w    io.Writer
}

func (l nodeLogger) logf(level, format string, v ...any) {
	fmt.Fprintf(l.w, "%s %s [%s] %s\n", time.Now().Format("15:04:05.000"), l.name, level, fmt.Sprintf(format, v...))
}

// Noticef keeps only the notices about the cluster's life: leaders,
// catch-ups, routes, starts and stops.
func (l nodeLogger) Noticef(format string, v ...any) {
	line := fmt.Sprintf(format, v...)
	for _, word := range []string{"leader", "Leader", "atchup", "oute", "ready", "Shutdown", "Exiting", "peer"} {
		if strings.Contains(line, word) {
			l.logf("INF", "%s", line)
			return
		}
	}
}

func (l nodeLogger) Warnf(format string, v ...any)  { l.logf("WRN", format, v...) }
func (l nodeLogger) Fatalf(format string, v ...any) { l.logf("FTL", format, v...) }
func (l nodeLogger) Errorf(format string, v ...any) { l.logf("ERR", format, v...) }
func (l nodeLogger) Debugf(string, ...any)          {}
func (l nodeLogger) Tracef(string, ...any)          {}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... %d lines before", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// gatedProc is one `gated serve` process against an external NATS
// server or cluster. It keeps its data directory, HTTP port and log
// buffer across restarts.
type gatedProc struct {
	name     string
	args     []string
	httpAddr string
	logs     *syncBuffer

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error
	starts int
}

// launchGated starts `gated serve --nats-url natsURL --replicas replicas`
// with its own data directory and HTTP port, and waits until /readyz says
// it is ready. The process and its plugins are killed when the test ends.
func launchGated(t *testing.T, name, natsURL string, replicas int, extra ...string) *gatedProc {
	t.Helper()
	g := &gatedProc{name: name, httpAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), logs: &syncBuffer{}}
	g.args = append([]string{"serve", "--nats-url", natsURL, "--replicas", strconv.Itoa(replicas),
		"--data-dir", t.TempDir(), "--http", g.httpAddr, "--log-format", "json"}, extra...)
	if !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--budgets") }) {
		// The loads of these suites are far above the built-in budgets of
		// one agent: they test gated's faults, not its budgets, so every
		// limit is lifted (and still counted).
		g.args = append(g.args, "--budgets", unlimitedBudgets(t))
	}
	t.Cleanup(func() {
		g.kill(t)
		if t.Failed() {
			t.Logf("%s logs:\n%s", g.name, lastLines(g.logs.String(), 300))
		}
	})
	g.start(t)
	return g
}

// start runs the process and waits until it is ready.
func (g *gatedProc) start(t *testing.T) {
	t.Helper()
	g.spawn(t)
	g.waitReady(t)
}

// spawn runs the process without waiting for it to be ready.
func (g *gatedProc) spawn(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.starts++
	fmt.Fprintf(g.logs, "=== %s start %d at %s\n", g.name, g.starts, time.Now().Format("15:04:05.000"))
	cmd := exec.Command(gatedBin, g.args...)
	cmd.Stdout, cmd.Stderr = g.logs, g.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	g.cmd, g.exited = cmd, exited
}

// waitReady polls /readyz until it answers 200; a process that exits
// first fails the test.
func (g *gatedProc) waitReady(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	exited := g.exited
	g.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if ok, _ := g.ready(); ok {
			return
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("%s exited before it was ready: %v\n%s", g.name, err, lastLines(g.logs.String(), 100))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 60s\n%s", g.name, lastLines(g.logs.String(), 100))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pid is the process id of the current run, 0 when it is not running.
func (g *gatedProc) pid() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd == nil {
		return 0
	}
	return g.cmd.Process.Pid
}

// kill SIGKILLs the process, waits for it to exit and for its plugin
// processes to go with it. It does nothing when the process is not
// running.
func (g *gatedProc) kill(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	cmd, exited := g.cmd, g.exited
	g.cmd, g.exited = nil, nil
	g.mu.Unlock()
	if cmd == nil {
		return
	}
	plugins := pluginPIDs(t, cmd.Process.Pid)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	fmt.Fprintf(g.logs, "=== %s killed at %s\n", g.name, time.Now().Format("15:04:05.000"))
	waitGone(t, plugins)
}

// gatedReadiness is the part of the /readyz document the suites look at.
type gatedReadiness struct {
	Ready   bool   `json:"ready"`
	Reason  string `json:"reason"`
	NATS    string `json:"nats"`
	Plugins []struct {
		Name    string `json:"name"`
		PID     int    `json:"pid"`
		Running bool   `json:"running"`
	} `json:"plugins"`
}

var probeClient = &http.Client{Timeout: 5 * time.Second}

// ready asks /readyz.
func (g *gatedProc) ready() (bool, gatedReadiness) {
	var doc gatedReadiness
	resp, err := probeClient.Get("http://" + g.httpAddr + "/readyz")
	if err != nil {
		return false, doc
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&doc)
	return resp.StatusCode == http.StatusOK, doc
}

// verdictsCounted sums gated_verdicts_total over its labels: the verdicts
// this run of the process decided or replayed.
func (g *gatedProc) verdictsCounted(t *testing.T) float64 {
	t.Helper()
	resp, err := probeClient.Get("http://" + g.httpAddr + "/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", g.name, err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "gated_verdicts_total{") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("%s /metrics line %q: %v", g.name, line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sum
}

// unlimitedBudgets writes a budgets file that lifts every limit of every
// tenant and agent, and returns its path.
func unlimitedBudgets(t *testing.T) string {
	t.Helper()
	scope := "{proposals: unlimited, reads: unlimited, tokens: unlimited, reviews_in_flight: unlimited, holds_pending: unlimited}"
	path := filepath.Join(t.TempDir(), "budgets.yaml")
	if err := os.WriteFile(path, []byte("defaults: {tenant: "+scope+", agent: "+scope+"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
