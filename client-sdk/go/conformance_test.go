package rebound_test

// The scenarios of client-sdk/CONFORMANCE.md, against live nodes (named as there).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	rebound "github.com/rebound-dev/rebound/client-sdk/go"
	pb "github.com/rebound-dev/rebound/client-sdk/go/reboundv1"
)

const service = "gosdk"

func client(t *testing.T, addr string, opts ...rebound.Option) *rebound.Client {
	t.Helper()
	c, err := rebound.New(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// runUntil runs ex until done() holds (failing after within), then stops it and waits.
func runUntil(t *testing.T, ex *rebound.Executor, within time.Duration, done func() bool) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() { result <- ex.Run(ctx) }()
	deadline := time.Now().Add(within)
	for !done() {
		select {
		case err := <-result:
			stop()
			t.Fatalf("the executor stopped early: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			<-result
			t.Fatal("timed out")
		}
	}
	stop()
	if err := <-result; err != nil {
		t.Fatalf("executor: %v", err)
	}
}

func mustEnqueue(t *testing.T, c *rebound.Client, tx string, opts ...rebound.EnqueueOption) *rebound.Enqueued {
	t.Helper()
	e, err := c.Enqueue(context.Background(), service, tx, opts...)
	if err != nil {
		t.Fatalf("enqueue %s: %v", tx, err)
	}
	return e
}

func status(t *testing.T, c *rebound.Client, tx string) *pb.Retry {
	t.Helper()
	r, err := c.Get(context.Background(), service, tx)
	if err != nil {
		t.Fatalf("get %s: %v", tx, err)
	}
	return r
}

func TestEnqueueGetCancel(t *testing.T) {
	n := newCluster(t).start()
	c := client(t, n.Address)
	ctx := context.Background()
	e := mustEnqueue(t, c, "tx-1", rebound.Payload([]byte("charge 7f3a")), rebound.Delay(5*time.Minute),
		rebound.Attribute("tenant", "acme"), rebound.Attempt(2), rebound.LastError("card processor timed out"),
		rebound.WithPolicy(rebound.NewPolicy().MaxAttempts(8).InitialBackoff(30*time.Second)))
	if e.TransactionID != "tx-1" || e.Deduplicated || !e.DueTime.After(time.Now()) {
		t.Fatalf("enqueued: %+v", e)
	}
	r := status(t, c, "tx-1")
	if r.GetStatus() != rebound.Scheduled || r.GetAttempt() != 2 || string(r.GetPayload()) != "charge 7f3a" ||
		r.GetAttributes()["tenant"] != "acme" || r.GetLastError() != "card processor timed out" ||
		r.GetPolicy().GetMaxAttempts() != 8 || r.GetPolicy().GetInitialBackoff().AsDuration() != 30*time.Second {
		t.Fatalf("get: %v", r)
	}
	st, cancelled, err := c.Cancel(ctx, service, "tx-1")
	if err != nil || st != rebound.Cancelled || !cancelled {
		t.Fatalf("cancel: %v %v %v", st, cancelled, err)
	}
	st, cancelled, err = c.Cancel(ctx, service, "tx-1")
	if err != nil || st != rebound.Cancelled || cancelled {
		t.Fatalf("second cancel: %v %v %v", st, cancelled, err)
	}
}

func TestListFiltersAndPages(t *testing.T) {
	n := newCluster(t).start()
	c := client(t, n.Address)
	ctx := context.Background()
	for i := range 7 {
		customer, last := "7", "gateway: 503"
		if i%2 == 0 {
			customer = "42"
		}
		if i < 3 {
			last = "card declined"
		}
		mustEnqueue(t, c, fmt.Sprintf("l-%d", i), rebound.Delay(time.Hour),
			rebound.Attribute("customer", customer), rebound.LastError(last))
	}
	var all []string
	for r, err := range c.ListRetries(ctx, service, rebound.ListFilter{PageSize: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, r.GetTransactionId())
	}
	sort.Strings(all)
	if strings.Join(all, ",") != "l-0,l-1,l-2,l-3,l-4,l-5,l-6" {
		t.Fatalf("all: %v", all)
	}
	var mine []string
	f := rebound.ListFilter{Attributes: map[string]string{"customer": "42"}, ErrorContains: "declined"}
	for r, err := range c.ListRetries(ctx, service, f) {
		if err != nil {
			t.Fatal(err)
		}
		if r.GetStatus() != rebound.Scheduled || r.GetAttempt() != 1 {
			t.Fatalf("row: %v", r)
		}
		mine = append(mine, r.GetTransactionId())
	}
	sort.Strings(mine)
	if strings.Join(mine, ",") != "l-0,l-2" {
		t.Fatalf("filtered: %v", mine)
	}
	for _, err := range c.ListRetries(ctx, service, rebound.ListFilter{PageSize: 501}) {
		if rebound.CodeOf(err) != codes.InvalidArgument {
			t.Fatalf("page size 501: %v", err)
		}
	}
}

func TestDeduplicatedReenqueue(t *testing.T) {
	n := newCluster(t).start()
	c := client(t, n.Address)
	due := time.Now().Add(10 * time.Minute)
	first := mustEnqueue(t, c, "tx-dup", rebound.DueAt(due))
	second := mustEnqueue(t, c, "tx-dup", rebound.DueAt(due))
	if first.Deduplicated || !second.Deduplicated {
		t.Fatalf("%+v %+v", first, second)
	}
	if got := status(t, c, "tx-dup").GetEnqueueCount(); got != 2 {
		t.Fatalf("enqueue_count %d", got)
	}
	results, err := c.EnqueueBatch(context.Background(), []*pb.EnqueueRetryRequest{
		rebound.NewEnqueueRequest(service, "tx-dup", rebound.DueAt(due)),
		rebound.NewEnqueueRequest(service, "tx-new"),
	})
	if err != nil || !results[0].Enqueued.Deduplicated || results[1].Enqueued.Deduplicated {
		t.Fatalf("batch: %+v %v", results, err)
	}
}

func TestBadInputNamesField(t *testing.T) {
	n := newCluster(t).start()
	c := client(t, n.Address)
	ctx := context.Background()
	_, err := c.Enqueue(ctx, service, strings.Repeat("x", 300))
	var e *rebound.Error
	if !errors.As(err, &e) || e.Code != codes.InvalidArgument || !strings.Contains(e.Message, "transaction_id") ||
		!strings.Contains(e.Message, "256") || e.Retryable() {
		t.Fatalf("long transaction id: %v", err)
	}
	_, err = c.Enqueue(ctx, service, "tx-bad", rebound.WithPolicy(rebound.NewPolicy().Multiplier(0.5)))
	if !errors.As(err, &e) || !strings.Contains(e.Message, "multiplier") {
		t.Fatalf("bad multiplier: %v", err)
	}
	if _, err := c.Get(ctx, service, "tx-bad"); rebound.CodeOf(err) != codes.NotFound {
		t.Fatalf("get after a refused enqueue: %v", err)
	}
	results, err := c.EnqueueBatch(ctx, []*pb.EnqueueRetryRequest{
		rebound.NewEnqueueRequest("bad service!", "tx-a"), rebound.NewEnqueueRequest(service, "tx-b"),
	})
	if err != nil || results[0].Err == nil || results[0].Err.Code != codes.InvalidArgument ||
		!strings.Contains(results[0].Err.Message, "service") || results[1].Err != nil {
		t.Fatalf("batch: %+v %v", results, err)
	}
}

func TestDeliveryAndAck(t *testing.T) {
	n := newCluster(t).start()
	c := client(t, n.Address)
	mustEnqueue(t, c, "tx-d", rebound.Payload([]byte("p")), rebound.Attribute("k", "v"), rebound.Delay(0))
	var mu sync.Mutex
	var jobs []*rebound.Job
	ex := rebound.NewExecutor(n.Address, service, func(ctx context.Context, j *rebound.Job) rebound.Outcome {
		mu.Lock()
		jobs = append(jobs, j)
		mu.Unlock()
		return rebound.Success()
	}, rebound.Concurrency(4))
	runUntil(t, ex, 30*time.Second, func() bool { return ex.Acked() >= 1 })
	if len(jobs) != 1 || jobs[0].TransactionID != "tx-d" || string(jobs[0].Payload) != "p" ||
		jobs[0].Attributes["k"] != "v" || jobs[0].Attempt != 2 || jobs[0].Node != n.Address {
		t.Fatalf("jobs: %+v", jobs)
	}
	if s := status(t, c, "tx-d").GetStatus(); s != rebound.Succeeded {
		t.Fatalf("status %v", s)
	}
}

func TestRetryAfterReschedules(t *testing.T) {
	n := newCluster(t).start()
	c := client(t, n.Address)
	mustEnqueue(t, c, "tx-r", rebound.Delay(0))
	var mu sync.Mutex
	var attempts []uint32
	var times []time.Time
	ex := rebound.NewExecutor(n.Address, service, func(ctx context.Context, j *rebound.Job) rebound.Outcome {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, j.Attempt)
		times = append(times, time.Now())
		if len(attempts) == 1 {
			return rebound.RetryAfter(2*time.Second, "busy")
		}
		return rebound.Success()
	})
	runUntil(t, ex, 30*time.Second, func() bool { return ex.Acked() >= 2 })
	if attempts[1] != attempts[0]+1 || times[1].Sub(times[0]) < 2*time.Second {
		t.Fatalf("attempts %v at %v", attempts, times)
	}
	if s := status(t, c, "tx-r").GetStatus(); s != rebound.Succeeded {
		t.Fatalf("status %v", s)
	}
}

func TestSnoozeUsesNoAttempt(t *testing.T) {
	n := newCluster(t).start()
	c := client(t, n.Address)
	mustEnqueue(t, c, "tx-s", rebound.Delay(0), rebound.WithPolicy(rebound.NewPolicy().MaxAttempts(2)))
	var mu sync.Mutex
	var attempts []uint32
	ex := rebound.NewExecutor(n.Address, service, func(ctx context.Context, j *rebound.Job) rebound.Outcome {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, j.Attempt)
		if len(attempts) < 3 {
			return rebound.Snooze(time.Second, "dependency in maintenance")
		}
		return rebound.Success()
	})
	runUntil(t, ex, 30*time.Second, func() bool { return ex.Acked() >= 3 })
	if fmt.Sprint(attempts) != "[2 2 2]" {
		t.Fatalf("attempts %v", attempts)
	}
	if s := status(t, c, "tx-s").GetStatus(); s != rebound.Succeeded {
		t.Fatalf("status %v", s)
	}
}

func TestDependencyHoldDefersWithoutUsingAttempts(t *testing.T) {
	n := newCluster(t).start()
	c := client(t, n.Address)
	const other, gateway = service + "-other", "payments-gateway"
	oneRetry := rebound.WithPolicy(rebound.NewPolicy().MaxAttempts(2))
	mustEnqueue(t, c, "tx-h1", rebound.Delay(0), oneRetry, rebound.Dependency(gateway))
	type delivery struct {
		tx      string
		attempt uint32
		at      time.Time
	}
	var mu sync.Mutex
	var seen []delivery
	handler := func(ctx context.Context, j *rebound.Job) rebound.Outcome {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, delivery{j.TransactionID, j.Attempt, time.Now()})
		if j.Dependency != gateway {
			t.Errorf("%s names dependency %q", j.TransactionID, j.Dependency)
		}
		if len(seen) == 1 {
			// The first answer holds the gateway for 2 s; the second retry naming it is
			// enqueued, in another service, while the hold lasts.
			if _, err := c.Enqueue(ctx, other, "tx-h2", rebound.Delay(0), oneRetry, rebound.Dependency(gateway)); err != nil {
				t.Errorf("enqueue tx-h2: %v", err)
			}
			return rebound.Hold(2*time.Second, "503, Retry-After: 2")
		}
		return rebound.Success()
	}
	ex := rebound.NewExecutor(n.Address, service, handler)
	otherEx := rebound.NewExecutor(n.Address, other, handler)
	ctx, stop := context.WithCancel(context.Background())
	otherDone := make(chan error, 1)
	go func() { otherDone <- otherEx.Run(ctx) }()
	stopOther := sync.OnceValue(func() error { stop(); return <-otherDone })
	defer stopOther()
	runUntil(t, ex, 60*time.Second, func() bool { return ex.Acked() >= 2 && otherEx.Acked() >= 1 })
	if err := stopOther(); err != nil {
		t.Fatalf("the other service's executor: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	h1 := 0
	for i, d := range seen {
		if d.tx == "tx-h1" {
			h1++
		}
		// Nothing naming the gateway during the hold, and no attempt used by it.
		if d.attempt != 2 || (i > 0 && d.at.Sub(seen[0].at) < 1900*time.Millisecond) {
			t.Fatalf("deliveries %+v", seen)
		}
	}
	if h1 != 2 {
		t.Fatalf("tx-h1 delivered %d times: %+v", h1, seen)
	}
	if s := status(t, c, "tx-h1").GetStatus(); s != rebound.Succeeded {
		t.Fatalf("tx-h1: %v", s)
	}
	if r, err := c.Get(context.Background(), other, "tx-h2"); err != nil || r.GetStatus() != rebound.Succeeded {
		t.Fatalf("tx-h2: %v %v", r, err)
	}
}

// TestCompensationChainRunsInReverseOnExhaustion: a saga's charge step fails until its 2
// attempts are used; its two compensations then run in the order given (the reverse of the
// steps they undo), each once, each after the one before it succeeded, and Get shows where
// the chain stands.
func TestCompensationChainRunsInReverseOnExhaustion(t *testing.T) {
	n := newCluster(t).start()
	c := client(t, n.Address)
	ctx := context.Background()
	const orders, undo = "saga-orders", "saga-undo"
	if _, err := c.Enqueue(ctx, orders, "charge-1", rebound.Attempt(1), rebound.Delay(0),
		rebound.WithPolicy(rebound.NewPolicy().MaxAttempts(2).InitialBackoff(100*time.Millisecond)),
		rebound.WithCompensation(rebound.NewCompensation(undo, "refund-1").Payload([]byte("refund charge-1"))),
		rebound.WithCompensation(rebound.NewCompensation(undo, "release-1").Payload([]byte("release stock")))); err != nil {
		t.Fatalf("enqueue charge-1: %v", err)
	}
	var mu sync.Mutex
	var undone []string
	ordersEx := rebound.NewExecutor(n.Address, orders, func(ctx context.Context, j *rebound.Job) rebound.Outcome {
		return rebound.Retry("card declined")
	})
	undoEx := rebound.NewExecutor(n.Address, undo, func(ctx context.Context, j *rebound.Job) rebound.Outcome {
		mu.Lock()
		defer mu.Unlock()
		undone = append(undone, j.TransactionID+": "+string(j.Payload))
		return rebound.Success()
	})
	runCtx, stop := context.WithCancel(ctx)
	results := make(chan error, 2)
	for _, ex := range []*rebound.Executor{ordersEx, undoEx} {
		go func() { results <- ex.Run(runCtx) }()
	}
	stopAll := sync.OnceValue(func() error {
		stop()
		return errors.Join(<-results, <-results)
	})
	defer stopAll()
	deadline := time.Now().Add(40 * time.Second)
	for {
		r, err := c.Get(ctx, orders, "charge-1")
		if err != nil {
			t.Fatalf("get charge-1: %v", err)
		}
		steps := r.GetChain().GetCompensations()
		done := len(steps) > 0
		for _, m := range steps {
			done = done && m.GetStatus() == rebound.Succeeded
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the compensations did not both succeed: %v", r)
		}
		select {
		case err := <-results:
			results <- err // for stopAll
			t.Fatalf("an executor stopped early: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Each ran once: nothing more arrives.
	time.Sleep(3 * time.Second)
	if err := stopAll(); err != nil {
		t.Fatalf("executors: %v", err)
	}
	mu.Lock()
	got := strings.Join(undone, ", ")
	mu.Unlock()
	if want := "refund-1: refund charge-1, release-1: release stock"; got != want {
		t.Fatalf("undone: %s, want %s", got, want)
	}
	step, err := c.Get(ctx, orders, "charge-1")
	if err != nil || step.GetStatus() != rebound.Dead || step.GetAttempt() != 2 {
		t.Fatalf("charge-1: %v %v", step, err)
	}
	if ch := step.GetChain(); ch.GetPosition() != 0 || len(ch.GetCompensations()) != 2 {
		t.Fatalf("charge-1's chain: %v", ch)
	}
	last, err := c.Get(ctx, undo, "release-1")
	if err != nil {
		t.Fatalf("get release-1: %v", err)
	}
	if ch := last.GetChain(); ch.GetSagaService() != orders || ch.GetSagaTransactionId() != "charge-1" ||
		ch.GetPosition() != 2 {
		t.Fatalf("release-1's chain: %v", ch)
	}
}

func TestFailedGoesToDeadLetters(t *testing.T) {
	n := newCluster(t).start()
	c := client(t, n.Address)
	mustEnqueue(t, c, "tx-f", rebound.Delay(0))
	ex := rebound.NewExecutor(n.Address, service, func(ctx context.Context, j *rebound.Job) rebound.Outcome {
		return rebound.Fail("card declined").WithErrorClass("card.declined")
	})
	runUntil(t, ex, 30*time.Second, func() bool { return ex.Acked() >= 1 })
	r := status(t, c, "tx-f")
	if r.GetStatus() != rebound.Dead || r.GetLastError() != "card declined" {
		t.Fatalf("retry: %v", r)
	}
}

func TestHandlerExceptionRetries(t *testing.T) {
	n := newCluster(t).start()
	c := client(t, n.Address)
	mustEnqueue(t, c, "tx-e", rebound.Delay(0), rebound.WithPolicy(rebound.NewPolicy().InitialBackoff(0)))
	var mu sync.Mutex
	var jobs []*rebound.Job
	ex := rebound.NewExecutor(n.Address, service, func(ctx context.Context, j *rebound.Job) rebound.Outcome {
		mu.Lock()
		jobs = append(jobs, j)
		first := len(jobs) == 1
		mu.Unlock()
		if first {
			panic("inventory service unreachable")
		}
		return rebound.Success()
	})
	runUntil(t, ex, 30*time.Second, func() bool { return ex.Acked() >= 2 })
	if jobs[1].Attempt != jobs[0].Attempt+1 || !strings.Contains(jobs[1].LastError, "inventory service unreachable") {
		t.Fatalf("second delivery: %+v", jobs[1])
	}
}

func TestTwoNodesOneAddress(t *testing.T) {
	cl := newCluster(t)
	a, b := cl.start(), cl.start()
	const n = 40
	ca, cb := client(t, a.Address), client(t, b.Address)
	for i := 0; i < n; i++ {
		mustEnqueue(t, []*rebound.Client{ca, cb}[i%2], fmt.Sprintf("tx-%d", i), rebound.Delay(0))
	}
	var mu sync.Mutex
	done := map[string]bool{}
	ex := rebound.NewExecutor(a.Address, service, func(ctx context.Context, j *rebound.Job) rebound.Outcome {
		mu.Lock()
		done[j.TransactionID] = true
		mu.Unlock()
		return rebound.Success()
	}, rebound.RingRefresh(500*time.Millisecond))
	want := fmt.Sprint([]string{a.Address, b.Address})
	if b.Address < a.Address {
		want = fmt.Sprint([]string{b.Address, a.Address})
	}
	runUntil(t, ex, 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == n && fmt.Sprint(ex.Nodes()) == want
	})
}

func TestStopDrainsInFlight(t *testing.T) {
	n := newCluster(t).start()
	c := client(t, n.Address)
	for i := 0; i < 3; i++ {
		mustEnqueue(t, c, fmt.Sprintf("tx-%d", i), rebound.Delay(0))
	}
	var started, finished atomic.Int32
	ex := rebound.NewExecutor(n.Address, service, func(ctx context.Context, j *rebound.Job) rebound.Outcome {
		started.Add(1)
		time.Sleep(1500 * time.Millisecond)
		finished.Add(1)
		return rebound.Success()
	}, rebound.Concurrency(3))
	ctx, stop := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() { result <- ex.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for started.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("not all three started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-result; err != nil {
		t.Fatal(err)
	}
	if finished.Load() != 3 || ex.Acked() != 3 {
		t.Fatalf("finished %d, acked %d", finished.Load(), ex.Acked())
	}
	for i := 0; i < 3; i++ {
		if s := status(t, c, fmt.Sprintf("tx-%d", i)).GetStatus(); s != rebound.Succeeded {
			t.Fatalf("tx-%d: %v", i, s)
		}
	}
}

func TestTokenRefusedAndAccepted(t *testing.T) {
	cl := newCluster(t)
	n := cl.start("REBOUND_CREDENTIALS_FILE=" + credentialsFile(t, "payments", "s3cret", service))
	ctx := context.Background()
	for _, opts := range [][]rebound.Option{nil, {rebound.WithToken("wrong")}} {
		_, err := client(t, n.Address, opts...).Enqueue(ctx, service, "tx-t", rebound.Delay(0))
		if rebound.CodeOf(err) != codes.Unauthenticated {
			t.Fatalf("without the right token: %v", err)
		}
	}
	c := client(t, n.Address, rebound.WithToken("s3cret"))
	mustEnqueue(t, c, "tx-t", rebound.Delay(0))
	if _, err := c.Enqueue(ctx, "other", "tx-t"); rebound.CodeOf(err) != codes.PermissionDenied {
		t.Fatalf("another service: %v", err)
	}
	ok := func(ctx context.Context, j *rebound.Job) rebound.Outcome { return rebound.Success() }
	refused := rebound.NewExecutor(n.Address, service, ok, rebound.ClientOptions(rebound.WithToken("wrong")))
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := refused.Run(rctx); rebound.CodeOf(err) != codes.Unauthenticated {
		t.Fatalf("executor with a wrong token: %v", err)
	}
	ex := rebound.NewExecutor(n.Address, service, ok, rebound.ClientOptions(rebound.WithToken("s3cret")))
	runUntil(t, ex, 30*time.Second, func() bool { return ex.Acked() >= 1 })
}

func TestLongHandlerExtendsDeadline(t *testing.T) {
	n := newCluster(t).start()
	c := client(t, n.Address)
	mustEnqueue(t, c, "tx-l", rebound.Delay(0), rebound.WithPolicy(rebound.NewPolicy().AckTimeout(time.Second)))
	var deliveries atomic.Int32
	ex := rebound.NewExecutor(n.Address, service, func(ctx context.Context, j *rebound.Job) rebound.Outcome {
		deliveries.Add(1)
		time.Sleep(3500 * time.Millisecond)
		return rebound.Success()
	})
	runUntil(t, ex, 30*time.Second, func() bool { return ex.Acked() >= 1 })
	r := status(t, c, "tx-l")
	if deliveries.Load() != 1 || r.GetStatus() != rebound.Succeeded || r.GetDeliveryCount() != 1 {
		t.Fatalf("deliveries %d, retry %v", deliveries.Load(), r)
	}
}

func TestTLSMutualAuth(t *testing.T) {
	certs := testCerts(t)
	creds := filepath.Join(t.TempDir(), "credentials.toml")
	text := fmt.Sprintf("[[credential]]\nname = \"sdk-client\"\nservices = [%q]\n", service)
	if err := os.WriteFile(creds, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	n := newCluster(t).start(
		"REBOUND_TLS_CERT_FILE="+filepath.Join(certs, "node.pem"),
		"REBOUND_TLS_KEY_FILE="+filepath.Join(certs, "node.key"),
		"REBOUND_TLS_CLIENT_CA_FILE="+filepath.Join(certs, "ca.pem"),
		"REBOUND_CREDENTIALS_FILE="+creds)
	tlsOpt := rebound.WithTLS(rebound.TLS{
		CAFile:   filepath.Join(certs, "ca.pem"),
		CertFile: filepath.Join(certs, "client.pem"),
		KeyFile:  filepath.Join(certs, "client.key"),
	})
	c := client(t, n.Address, tlsOpt)
	mustEnqueue(t, c, "tx-tls", rebound.Delay(0), rebound.Payload([]byte("over tls")))
	var mu sync.Mutex
	var payloads []string
	ex := rebound.NewExecutor(n.Address, service, func(ctx context.Context, j *rebound.Job) rebound.Outcome {
		mu.Lock()
		defer mu.Unlock()
		payloads = append(payloads, string(j.Payload))
		return rebound.Success()
	}, rebound.ClientOptions(tlsOpt))
	runUntil(t, ex, 30*time.Second, func() bool { return ex.Acked() >= 1 })
	if r := status(t, c, "tx-tls"); r.GetStatus() != rebound.Succeeded || payloads[0] != "over tls" {
		t.Fatalf("payloads %q, retry %v", payloads, r)
	}
	for _, ca := range []string{"ca.pem", "other-ca.pem"} {
		refused := client(t, n.Address, rebound.WithTLS(rebound.TLS{CAFile: filepath.Join(certs, ca)}))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := refused.Enqueue(ctx, service, "tx-tls-refused", rebound.Delay(0))
		cancel()
		if rebound.CodeOf(err) != codes.Unavailable {
			t.Fatalf("trusting %s, without a client certificate: %v", ca, err)
		}
	}
}

func TestOverloadIsShedAndRetried(t *testing.T) {
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	// Room for about one 0.85 MiB batch at a time, each byte counted six times (the node's minimum
	// is 6 x (4 x 16 KiB + 1 MiB)).
	n := newCluster(t).start("REBOUND_MAX_PAYLOAD_BYTES=16384", "REBOUND_MAX_INFLIGHT_BYTES=7200000",
		"REBOUND_HTTP_LISTEN="+metrics)
	// Eight batches contend for room for one: the last through may be refused about once per
	// batch ahead of it, and more on a slow machine, so a bound above the default 10 attempts
	// (the call's 30 s deadline still bounds it).
	c := client(t, n.Address, rebound.WithOverloadRetry(50, 30*time.Second))
	payload := []byte(strings.Repeat("x", 16<<10))
	const batches, items = 8, 50
	// Eight batches at once shed some of them; the client's retries get every one through.
	// Rounds until the node has counted a shed request (the first one nearly always does).
	for round := 0; ; round++ {
		var wg sync.WaitGroup
		errs := make([]error, batches)
		for b := 0; b < batches; b++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reqs := make([]*pb.EnqueueRetryRequest, items)
				for i := range reqs {
					reqs[i] = rebound.NewEnqueueRequest(service, fmt.Sprintf("tx-%d-%d-%d", round, b, i),
						rebound.Payload(payload), rebound.Delay(10*time.Minute))
				}
				results, err := c.EnqueueBatch(context.Background(), reqs)
				if err == nil {
					for i, r := range results {
						if r.Err != nil {
							err = fmt.Errorf("item %d: %v", i, r.Err)
							break
						}
					}
				}
				errs[b] = err
			}()
		}
		wg.Wait()
		for b, err := range errs {
			if err != nil {
				t.Fatalf("round %d, batch %d: %v", round, b, err)
			}
		}
		for _, tx := range []string{"tx-%d-0-0", "tx-%d-3-17", "tx-%d-7-49"} {
			if r := status(t, c, fmt.Sprintf(tx, round)); r.GetStatus() != rebound.Scheduled || len(r.GetPayload()) != 16<<10 {
				t.Fatalf("%s: %v", fmt.Sprintf(tx, round), r.GetStatus())
			}
		}
		shed := shedRequests(t, metrics)
		t.Logf("round %d: %v requests shed so far", round, shed)
		if shed > 0 {
			return
		}
		if round == 4 {
			t.Fatalf("%d rounds of %d batches at once, and the node shed none", round+1, batches)
		}
	}
}

// shedRequests reads rebound_requests_shed_total{reason="inflight_bytes"} from a node's
// /metrics (0 when absent).
func shedRequests(t *testing.T, addr string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "rebound_requests_shed_total{") && strings.Contains(line, `reason="inflight_bytes"`) {
			fields := strings.Fields(line)
			v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			return v
		}
	}
	return 0
}
