package rebound_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The saga example (cmd/saga), built and run as its own process against a live node.
func TestSagaExample(t *testing.T) {
	n := newCluster(t).start()
	bin := filepath.Join(t.TempDir(), "saga")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/saga").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/saga: %v: %s", err, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, n.Address).CombinedOutput()
	if err != nil {
		t.Fatalf("saga: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "saga compensated") {
		t.Fatalf("saga: no final line: %s", out)
	}
	t.Logf("%s", out)
}
