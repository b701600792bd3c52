package rebound

// The overload retries against an in-process gRPC server that refuses calls as a shedding
// node does (RESOURCE_EXHAUSTED in a trailers-only response, with or without a
// grpc-retry-pushback-ms hint). The live node's shedding is conformance_test.go's
// TestOverloadIsShedAndRetried.

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/rebound-dev/rebound/client-sdk/go/reboundv1"
)

// refuser answers its first `refuse` calls with `code` and the hint (none when empty), then
// succeeds; it records when each call came.
type refuser struct {
	pb.UnimplementedRetryServiceServer
	pb.UnimplementedExecutorServiceServer
	code   codes.Code
	hint   string
	refuse int
	mu     sync.Mutex
	calls  []time.Time
}

func (f *refuser) answer(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, time.Now())
	if len(f.calls) > f.refuse {
		return nil
	}
	if f.hint != "" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(pushbackKey, f.hint))
	}
	return status.Error(f.code, "the node is holding its bytes of requests (REBOUND_MAX_INFLIGHT_BYTES)")
}

func (f *refuser) attempts() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.calls...)
}

func (f *refuser) EnqueueRetry(ctx context.Context, r *pb.EnqueueRetryRequest) (*pb.EnqueueRetryResponse, error) {
	if err := f.answer(ctx); err != nil {
		return nil, err
	}
	return &pb.EnqueueRetryResponse{TransactionId: r.GetTransactionId()}, nil
}

func (f *refuser) GetRetry(ctx context.Context, r *pb.GetRetryRequest) (*pb.Retry, error) {
	if err := f.answer(ctx); err != nil {
		return nil, err
	}
	return &pb.Retry{TransactionId: r.GetTransactionId()}, nil
}

func (f *refuser) Ack(ctx context.Context, r *pb.AckRequest) (*pb.AckResponse, error) {
	if err := f.answer(ctx); err != nil {
		return nil, err
	}
	return &pb.AckResponse{}, nil
}

func serve(t *testing.T, f *refuser) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pb.RegisterRetryServiceServer(s, f)
	pb.RegisterExecutorServiceServer(s, f)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

func newClient(t *testing.T, addr string, opts ...Option) *Client {
	t.Helper()
	c, err := New(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func gaps(calls []time.Time) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(calls); i++ {
		out = append(out, calls[i].Sub(calls[i-1]))
	}
	return out
}

func TestOverloadWaitsThePushbackHint(t *testing.T) {
	f := &refuser{code: codes.ResourceExhausted, hint: "200", refuse: 2}
	c := newClient(t, serve(t, f))
	if _, err := c.Enqueue(context.Background(), "svc", "tx"); err != nil {
		t.Fatal(err)
	}
	calls := f.attempts()
	if len(calls) != 3 {
		t.Fatalf("%d attempts", len(calls))
	}
	for _, g := range gaps(calls) {
		if g < 200*time.Millisecond || g > 300*time.Millisecond+300*time.Millisecond {
			t.Fatalf("waited %v for a 200 ms hint (x [1, 1.5))", gaps(calls))
		}
	}
}

func TestOverloadWithoutHintBacksOff(t *testing.T) {
	for _, hint := range []string{"", "soon", "-5", "1.5"} {
		f := &refuser{code: codes.ResourceExhausted, hint: hint, refuse: 3}
		c := newClient(t, serve(t, f))
		if _, err := c.Get(context.Background(), "svc", "tx"); err != nil {
			t.Fatalf("hint %q: %v", hint, err)
		}
		g := gaps(f.attempts())
		// 100, 200 and 400 ms, each +-20 %.
		if len(g) != 3 || g[0] < 80*time.Millisecond || g[1] < 160*time.Millisecond || g[2] < 320*time.Millisecond ||
			g[2] > 480*time.Millisecond+300*time.Millisecond {
			t.Fatalf("hint %q: waits %v", hint, g)
		}
	}
}

func TestOverloadRetriesAreBounded(t *testing.T) {
	// By the attempts.
	f := &refuser{code: codes.ResourceExhausted, hint: "0", refuse: 1 << 30}
	c := newClient(t, serve(t, f), WithOverloadRetry(3, time.Minute))
	_, err := c.Enqueue(context.Background(), "svc", "tx")
	var e *Error
	if !errors.As(err, &e) || e.Code != codes.ResourceExhausted || !e.Retryable() || len(f.attempts()) != 3 {
		t.Fatalf("%v after %d attempts", err, len(f.attempts()))
	}
	// By the total time: a retry at 300-450 ms, none that would start after 500 ms.
	f = &refuser{code: codes.ResourceExhausted, hint: "300", refuse: 1 << 30}
	c = newClient(t, serve(t, f), WithOverloadRetry(100, 500*time.Millisecond))
	if _, err := c.Enqueue(context.Background(), "svc", "tx"); CodeOf(err) != codes.ResourceExhausted || len(f.attempts()) != 2 {
		t.Fatalf("%v after %d attempts", err, len(f.attempts()))
	}
	// By the call's deadline: a wait that would pass it is not started.
	f = &refuser{code: codes.ResourceExhausted, hint: "2000", refuse: 1 << 30}
	c = newClient(t, serve(t, f))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	if _, err := c.Enqueue(ctx, "svc", "tx"); CodeOf(err) != codes.ResourceExhausted || len(f.attempts()) != 1 ||
		time.Since(start) >= time.Second {
		t.Fatalf("%v after %d attempts, %v", err, len(f.attempts()), time.Since(start))
	}
	// Off.
	f = &refuser{code: codes.ResourceExhausted, hint: "0", refuse: 1 << 30}
	c = newClient(t, serve(t, f), WithOverloadRetry(1, 0))
	if _, err := c.Enqueue(context.Background(), "svc", "tx"); CodeOf(err) != codes.ResourceExhausted || len(f.attempts()) != 1 {
		t.Fatalf("%v after %d attempts", err, len(f.attempts()))
	}
}

func TestOnlyResourceExhaustedIsRetriedForOverload(t *testing.T) {
	for _, code := range []codes.Code{codes.Unavailable, codes.FailedPrecondition, codes.Internal} {
		f := &refuser{code: code, hint: "0", refuse: 1}
		c := newClient(t, serve(t, f))
		if _, err := c.Enqueue(context.Background(), "svc", "tx"); CodeOf(err) != code || len(f.attempts()) != 1 {
			t.Fatalf("%v: %v after %d attempts", code, err, len(f.attempts()))
		}
	}
}

func TestAcksAreRetriedAfterTheHint(t *testing.T) {
	f := &refuser{code: codes.ResourceExhausted, hint: "100", refuse: 2}
	conn, err := dial(serve(t, f), collect(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	a := newAcker(pb.NewExecutorServiceClient(conn), "", defaultOverloadRetry())
	a.put(&pb.AckRequest{DeliveryId: "d-1", Outcome: pb.AckOutcome_ACK_OUTCOME_SUCCEEDED})
	a.close()
	if a.acked.Load() != 1 || a.refused.Load() != 0 || len(f.attempts()) != 3 {
		t.Fatalf("acked %d, refused %d, %d attempts", a.acked.Load(), a.refused.Load(), len(f.attempts()))
	}
	for _, g := range gaps(f.attempts()) {
		if g < 100*time.Millisecond {
			t.Fatalf("waits %v for a 100 ms hint", gaps(f.attempts()))
		}
	}
}

func TestPushbackParsing(t *testing.T) {
	for _, tc := range []struct {
		vals []string
		want time.Duration
		ok   bool
	}{
		{nil, 0, false},
		{[]string{"250"}, 250 * time.Millisecond, true},
		{[]string{"0"}, 0, true},
		{[]string{"-1"}, 0, false},
		{[]string{"+5"}, 0, false},
		{[]string{"soon"}, 0, false},
		{[]string{""}, 0, false},
		{[]string{"250", "300"}, 0, false},
		{[]string{"99999999999999999999"}, 0, false},
		{[]string{"86400000"}, time.Hour, true},
	} {
		md := metadata.MD{}
		for _, v := range tc.vals {
			md.Append(pushbackKey, v)
		}
		got, ok := pushback(md)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: %v %v, want %v %v", tc.vals, got, ok, tc.want, tc.ok)
		}
	}
	if d := overloadWait(20, 0, false); d < 4*time.Second || d > 6*time.Second {
		t.Errorf("the backoff is capped at 5 s +-20 %%: %v", d)
	}
}
