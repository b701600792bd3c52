package rebound_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A live node per test: the repository's rebound-server binary ($REBOUND_SERVER_BIN, or
// target/debug/rebound-server) as a process, on the Cassandra of scripts/cassandra, in a
// keyspace of its own, with 1 s windows.

type testNode struct {
	Address string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process has exited
}

type cluster struct {
	t        *testing.T
	keyspace string
	nodes    []*testNode
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	c := &cluster{t: t, keyspace: "sdk_go_" + hex.EncodeToString(b)}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.stop()
		}
	})
	return c
}

func serverBin(t *testing.T) string {
	if b := os.Getenv("REBOUND_SERVER_BIN"); b != "" {
		return b
	}
	b, err := filepath.Abs("../../target/debug/rebound-server")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (c *cluster) start(env ...string) *testNode {
	t := c.t
	t.Helper()
	id := fmt.Sprintf("go-%d", len(c.nodes))
	logName := filepath.Join(t.TempDir(), id+".log")
	// A port found free can be taken before the node binds it (by any outgoing connection,
	// which draws from the same range): start again on another one.
	for try := 0; try < 5; try++ {
		if n := c.startOn(freePort(t), id, logName, env); n != nil {
			return n
		}
	}
	out, _ := os.ReadFile(logName)
	t.Fatalf("rebound-server found no free port: %s", out)
	return nil
}

// startOn starts a node on port and waits until it listens; nil when the port was taken.
func (c *cluster) startOn(port int, id, logName string, env []string) *testNode {
	t := c.t
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(serverBin(t))
	cmd.Env = append(os.Environ(),
		"REBOUND_LISTEN="+addr, "REBOUND_KEYSPACE="+c.keyspace, "REBOUND_NODE_ID="+id,
		"REBOUND_WINDOW_SECONDS=1", "REBOUND_SKEW_MARGIN_MS=200", "REBOUND_SCAN_INTERVAL_MS=50",
		"REBOUND_COMPACTION_INTERVAL_MS=200", "REBOUND_SLOTS=8", "REBOUND_LEASE_TTL_MS=3000",
		"REBOUND_LANES=2", "REBOUND_SHUTDOWN_GRACE_MS=1000", "RUST_LOG=warn")
	cmd.Env = append(cmd.Env, env...)
	log, err := os.Create(logName)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n := &testNode{Address: addr, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(n.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-n.exited:
			out, _ := os.ReadFile(logName)
			if strings.Contains(string(out), "Address already in use") {
				return nil
			}
			t.Fatalf("rebound-server exited: %s", out)
		default:
		}
		if conn, err := net.DialTimeout("tcp", addr, 500*time.Millisecond); err == nil {
			conn.Close()
			c.nodes = append(c.nodes, n)
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.nodes = append(c.nodes, n)
	out, _ := os.ReadFile(logName)
	t.Fatalf("rebound-server did not listen on %s: %s", addr, out)
	return nil
}

func (n *testNode) stop() {
	if n.cmd.Process == nil {
		return
	}
	_ = n.cmd.Process.Signal(os.Interrupt)
	select {
	case <-n.exited:
	case <-time.After(10 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.exited
	}
}

// credentialsFile writes a credentials file with one non-admin credential.
func credentialsFile(t *testing.T, name, token string, services ...string) string {
	sum := sha256.Sum256([]byte(token))
	quoted := make([]string, len(services))
	for i, s := range services {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	text := fmt.Sprintf("[[credential]]\nname = %q\ntoken_sha256 = %q\nservices = [%s]\nadmin = false\n",
		name, hex.EncodeToString(sum[:]), strings.Join(quoted, ", "))
	p := filepath.Join(t.TempDir(), "credentials.toml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testCerts writes the certificates of scripts/test-certs (ca.pem, node.pem, client.pem with
// CN=sdk-client, other-ca.pem, ...) into a temporary directory and returns it.
func testCerts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	script, err := filepath.Abs("../../scripts/test-certs")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(script, dir).CombinedOutput(); err != nil {
		t.Fatalf("scripts/test-certs: %v: %s", err, out)
	}
	return dir
}
