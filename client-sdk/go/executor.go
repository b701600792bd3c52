package rebound

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/rebound-dev/rebound/client-sdk/go/reboundv1"
)

const (
	maxAckBatch    = 500 // acks in one AckBatch call
	ackCalls       = 4   // ack calls in flight per node
	rpcTimeout     = 10 * time.Second
	maxErrorBytes  = 8192 // the server's limit on an ack's error text
	maxReasonBytes = 1024 // the server's limit on a hold's reason
	minExtension   = time.Second
	minExtendPause = 50 * time.Millisecond
)

// Job is one delivery of a due retry.
type Job struct {
	DeliveryID    string
	Service       string
	TransactionID string
	// This delivery's attempt number (the caller's own tries included).
	Attempt         uint32
	Payload         []byte
	Attributes      map[string]string
	DueTime         time.Time
	FirstEnqueuedAt time.Time
	AckDeadline     time.Time
	LastError       string
	// The dependency the retry names (empty: none); Hold holds it.
	Dependency string
	// The trace context stored at the first enqueue (empty when none).
	Traceparent, Tracestate string
	// The node that sent it; acks and extensions go back to it.
	Node string
}

// Outcome is a handler's answer; build one with Success, Retry, RetryAfter, Fail, Snooze or
// Hold.
type Outcome struct {
	kind   pb.AckOutcome
	err    string
	after  *time.Duration
	snooze bool
	class  string
	hold   *time.Duration
}

// Success acknowledges the job as done.
func Success() Outcome { return Outcome{kind: pb.AckOutcome_ACK_OUTCOME_SUCCEEDED} }

// Retry tries again after the policy's backoff.
func Retry(err string) Outcome { return Outcome{kind: pb.AckOutcome_ACK_OUTCOME_RETRY, err: err} }

// RetryAfter tries again after the given delay.
func RetryAfter(after time.Duration, err string) Outcome {
	return Outcome{kind: pb.AckOutcome_ACK_OUTCOME_RETRY, err: err, after: &after}
}

// Fail dead-letters the retry now: retrying will not help.
func Fail(err string) Outcome { return Outcome{kind: pb.AckOutcome_ACK_OUTCOME_FAILED, err: err} }

// Snooze runs the job again after the delay without using an attempt (it was not tried, only
// postponed).
func Snooze(after time.Duration, reason string) Outcome {
	return Outcome{kind: pb.AckOutcome_ACK_OUTCOME_RETRY, err: reason, after: &after, snooze: true}
}

// Hold reports that the dependency the retry names (Job.Dependency) is down for duration (the
// Retry-After it answered, say): it is held, so that no retry naming it is delivered, in any
// service, until then, and this one is postponed to the hold's end without using an attempt.
// When the hold ends one delivery goes first as a probe; if it succeeds the rest follow. The
// duration must be 1 s to 24 h, and the node refuses a hold for a retry that names no
// dependency. The reason is the retry's error too (the hold's is cut to 1 KiB).
func Hold(duration time.Duration, reason string) Outcome {
	return Outcome{kind: pb.AckOutcome_ACK_OUTCOME_RETRY, err: reason, hold: &duration}
}

// WithErrorClass tags the outcome with a machine-readable class such as "http.404"; a RETRY
// whose class the policy lists as non-retryable dead-letters at once.
func (o Outcome) WithErrorClass(class string) Outcome { o.class = class; return o }

// truncate cuts s to at most limit bytes, at a character boundary.
func truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	s = s[:limit]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

func (o Outcome) ack(deliveryID string) *pb.AckRequest {
	a := &pb.AckRequest{
		DeliveryId: deliveryID, Outcome: o.kind, Error: truncate(o.err, maxErrorBytes),
		Snooze: o.snooze, ErrorClass: o.class,
	}
	if o.after != nil {
		a.RetryAfter = durationpb.New(*o.after)
	}
	if o.hold != nil {
		a.Hold = &pb.DependencyHold{Duration: durationpb.New(*o.hold), Reason: truncate(o.err, maxReasonBytes)}
	}
	return a
}

// Handler runs one job. Its context ends when the executor's drain timeout passes. A panic
// counts as Retry with the panic's message.
type Handler func(ctx context.Context, job *Job) Outcome

// ExecutorOption configures an Executor.
type ExecutorOption func(*Executor)

// Concurrency bounds the handlers running at once across all nodes (default 16); it is also
// each stream's max_in_flight.
func Concurrency(n int) ExecutorOption { return func(e *Executor) { e.concurrency = n } }

// ExecutorID names this executor to the nodes (default host-pid-random).
func ExecutorID(id string) ExecutorOption { return func(e *Executor) { e.id = id } }

// FollowRing: subscribe to every node GetRing lists (default true), or to the address only.
func FollowRing(on bool) ExecutorOption { return func(e *Executor) { e.followRing = on } }

// RingRefresh: how often the ring is asked again (default 5 s, jittered).
func RingRefresh(d time.Duration) ExecutorOption { return func(e *Executor) { e.ringRefresh = d } }

// DrainTimeout: how long a stop lets running handlers finish and ack (default 30 s).
func DrainTimeout(d time.Duration) ExecutorOption { return func(e *Executor) { e.drainTimeout = d } }

// ClientOptions: the token, TLS and dial options of the executor's channels, and the bound
// of the retries of acks and deadline extensions the node answers RESOURCE_EXHAUSTED
// (WithOverloadRetry; default 10 attempts, 30 s).
func ClientOptions(opts ...Option) ExecutorOption {
	return func(e *Executor) { e.clientOpts = append(e.clientOpts, opts...) }
}

// Executor runs a handler for every due retry of a service. Run it with Run.
type Executor struct {
	address, service, id      string
	handler                   Handler
	concurrency               int
	followRing                bool
	ringRefresh, drainTimeout time.Duration
	clientOpts                []Option

	o         options
	sem       chan struct{}
	stopping  chan struct{}
	stopOnce  sync.Once
	fatal     chan error
	handlers  sync.WaitGroup
	handlerCx context.Context
	mu        sync.Mutex
	nodes     map[string]*node
	retired   sync.WaitGroup
	delivered atomic.Int64
	ackedGone atomic.Int64
}

// NewExecutor returns an executor of service's retries, asking address for the ring.
func NewExecutor(address, service string, handler Handler, opts ...ExecutorOption) *Executor {
	host, _ := os.Hostname()
	e := &Executor{
		address: address, service: service, handler: handler,
		id:          fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.IntN(1<<16)),
		concurrency: 16, followRing: true, ringRefresh: 5 * time.Second, drainTimeout: 30 * time.Second,
	}
	for _, f := range opts {
		f(e)
	}
	return e
}

// Delivered counts the deliveries received so far.
func (e *Executor) Delivered() int64 { return e.delivered.Load() }

// Acked counts the acks the nodes accepted so far.
func (e *Executor) Acked() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.ackedGone.Load()
	for _, nd := range e.nodes {
		n += nd.acks.acked.Load()
	}
	return n
}

// Nodes lists the addresses subscribed to now.
func (e *Executor) Nodes() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for a, n := range e.nodes {
		if !n.retiring.Load() {
			out = append(out, a)
		}
	}
	sort.Strings(out)
	return out
}

func isFatal(c codes.Code) bool {
	return c == codes.InvalidArgument || c == codes.Unimplemented || c == codes.Unauthenticated || c == codes.PermissionDenied
}

// backoff is full-jitter exponential backoff: uniform in [0, min(5 s, 100 ms * 2^attempt)].
func backoff(attempt int) time.Duration {
	limit := 5 * time.Second
	if attempt < 6 {
		limit = min(limit, 100*time.Millisecond<<attempt)
	}
	return time.Duration(rand.Int64N(int64(limit) + 1))
}

// Run subscribes and runs handlers until ctx ends, then drains: no new handler starts,
// running ones finish and ack (up to the drain timeout), the streams close. It returns an
// *Error when Subscribe fails in a way retrying cannot fix (INVALID_ARGUMENT, UNIMPLEMENTED,
// UNAUTHENTICATED, PERMISSION_DENIED), after draining.
func (e *Executor) Run(ctx context.Context) error {
	if e.concurrency < 1 {
		return &Error{Code: codes.InvalidArgument, Message: "executor concurrency must be at least 1"}
	}
	e.o = collect(e.clientOpts)
	seed, err := dial(e.address, e.o)
	if err != nil {
		return err
	}
	defer seed.Close()
	seedClient := pb.NewExecutorServiceClient(seed)
	e.sem = make(chan struct{}, e.concurrency)
	e.stopping = make(chan struct{})
	e.fatal = make(chan error, 1)
	e.nodes = map[string]*node{}
	handlerCx, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	e.handlerCx = handlerCx

	e.refresh(seedClient)
	ringDone := make(chan struct{})
	go func() {
		defer close(ringDone)
		if !e.followRing {
			return
		}
		for {
			d := time.Duration(float64(e.ringRefresh) * (0.8 + 0.4*rand.Float64()))
			select {
			case <-e.stopping:
				return
			case <-time.After(d):
				e.refresh(seedClient)
			}
		}
	}()

	var result error
	select {
	case <-ctx.Done():
	case result = <-e.fatal:
	}
	e.stopOnce.Do(func() { close(e.stopping) })
	<-ringDone

	// Drain: running handlers finish and ack while their streams stay open.
	finished := make(chan struct{})
	go func() { e.handlers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(e.drainTimeout):
		slog.Warn("rebound: handlers still running at the drain timeout: their context is cancelled")
		abort()
		select {
		case <-finished:
		case <-time.After(time.Second):
		}
	}
	e.mu.Lock()
	nodes := make([]*node, 0, len(e.nodes))
	for _, n := range e.nodes {
		nodes = append(nodes, n)
	}
	e.mu.Unlock()
	for _, n := range nodes {
		n.acks.close()
	}
	for _, n := range nodes {
		n.cancel()
		<-n.done
		_ = n.conn.Close()
	}
	e.retired.Wait()
	return result
}

// The ring.

func (e *Executor) ring(c pb.ExecutorServiceClient) []string {
	ctx, cancel := context.WithTimeout(outgoing(context.Background(), e.o.token), rpcTimeout)
	defer cancel()
	r, err := c.GetRing(ctx, &pb.GetRingRequest{})
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, n := range r.GetNodes() {
		if a := n.GetAddress(); a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

func (e *Executor) refresh(seed pb.ExecutorServiceClient) {
	var addrs []string
	if e.followRing {
		addrs = e.ring(seed)
		if addrs == nil {
			e.mu.Lock()
			var others []*node
			for _, n := range e.nodes {
				if !n.retiring.Load() {
					others = append(others, n)
				}
			}
			e.mu.Unlock()
			for _, n := range others {
				if addrs = e.ring(n.client); addrs != nil {
					break
				}
			}
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if addrs == nil {
		if len(e.nodes) > 0 {
			return // a failed GetRing leaves the subscriptions as they are
		}
		addrs = []string{e.address}
	}
	want := map[string]bool{}
	for _, a := range addrs {
		want[a] = true
		if _, ok := e.nodes[a]; !ok {
			select {
			case <-e.stopping:
				continue
			default:
			}
			if n, err := e.subscribe(a); err == nil {
				e.nodes[a] = n
			} else {
				slog.Warn("rebound: cannot open a channel", "address", a, "error", err)
			}
		}
	}
	for a, n := range e.nodes {
		if !want[a] && !n.retiring.Load() {
			slog.Info("rebound: node left the ring: unsubscribing once its jobs are acked", "address", a)
			n.retiring.Store(true)
			e.retired.Add(1)
			go e.retire(n)
		}
	}
}

type node struct {
	address  string
	conn     *grpc.ClientConn
	client   pb.ExecutorServiceClient
	acks     *acker
	cancel   context.CancelFunc
	done     chan struct{}
	held     sync.WaitGroup
	retiring atomic.Bool
}

func (e *Executor) subscribe(address string) (*node, error) {
	conn, err := dial(address, e.o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{address: address, conn: conn, client: pb.NewExecutorServiceClient(conn), cancel: cancel, done: make(chan struct{})}
	n.acks = newAcker(n.client, e.o.token, e.o.overload)
	go e.subscription(ctx, n)
	return n, nil
}

func (e *Executor) retire(n *node) {
	defer e.retired.Done()
	n.held.Wait()
	n.acks.close()
	n.cancel()
	<-n.done
	_ = n.conn.Close()
	e.mu.Lock()
	if e.nodes[n.address] == n {
		delete(e.nodes, n.address)
		e.ackedGone.Add(n.acks.acked.Load())
	}
	e.mu.Unlock()
}

func (e *Executor) stopped() bool {
	select {
	case <-e.stopping:
		return true
	default:
		return false
	}
}

// One subscription.

func (e *Executor) subscription(ctx context.Context, n *node) {
	defer close(n.done)
	req := &pb.SubscribeRequest{Service: e.service, ExecutorId: e.id, MaxInFlight: uint32(min(e.concurrency, 1<<31))}
	attempt := 0
	for ctx.Err() == nil && !e.stopped() && !n.retiring.Load() {
		stream, err := n.client.Subscribe(outgoing(ctx, e.o.token), req)
		for err == nil {
			var d *pb.Delivery
			d, err = stream.Recv()
			if err != nil {
				break
			}
			attempt = 0
			if e.stopped() || n.retiring.Load() {
				continue // the node redelivers it once the stream closes
			}
			received := time.Now()
			n.held.Add(1)
			e.delivered.Add(1)
			select {
			case e.sem <- struct{}{}:
			case <-ctx.Done():
				n.held.Done()
				return
			}
			if e.stopped() {
				<-e.sem
				n.held.Done()
				continue
			}
			e.handlers.Add(1)
			go e.handle(n, jobOf(d, n.address), received)
		}
		if ctx.Err() != nil {
			return
		}
		if code := status.Code(err); isFatal(code) {
			slog.Error("rebound: subscribe refused", "address", n.address, "error", err)
			select {
			case e.fatal <- wrap(err):
			default:
			}
			return
		}
		slog.Info("rebound: stream ended; subscribing again", "address", n.address, "error", err)
		attempt++
		select {
		case <-time.After(backoff(attempt)):
		case <-ctx.Done():
			return
		case <-e.stopping:
			return
		}
	}
}

func jobOf(d *pb.Delivery, address string) *Job {
	return &Job{
		DeliveryID: d.GetDeliveryId(), Service: d.GetService(), TransactionID: d.GetTransactionId(),
		Attempt: d.GetAttempt(), Payload: d.GetPayload(), Attributes: d.GetAttributes(),
		DueTime: timeOf(d.GetDueTime()), FirstEnqueuedAt: timeOf(d.GetFirstEnqueuedAt()),
		AckDeadline: timeOf(d.GetAckDeadline()), LastError: d.GetLastError(), Dependency: d.GetDependency(),
		Traceparent: d.GetTraceContext().GetTraceparent(), Tracestate: d.GetTraceContext().GetTracestate(),
		Node: address,
	}
}

func (e *Executor) handle(n *node, job *Job, received time.Time) {
	defer func() {
		<-e.sem
		n.held.Done()
		e.handlers.Done()
	}()
	ext, stopExt := context.WithCancel(context.Background())
	go e.keepExtended(ext, n, job, received)
	outcome := func() (o Outcome) {
		defer func() {
			if r := recover(); r != nil {
				o = Retry(fmt.Sprintf("panic: %v", r))
			}
		}()
		return e.handler(e.handlerCx, job)
	}()
	stopExt()
	n.acks.put(outcome.ack(job.DeliveryID))
}

// keepExtended calls ExtendDeadline when half of the time left has passed, each time by the
// ack timeout the delivery came with (as observed: deadline - arrival, at least 1 s).
func (e *Executor) keepExtended(ctx context.Context, n *node, job *Job, received time.Time) {
	if job.AckDeadline.IsZero() {
		return
	}
	deadline := job.AckDeadline
	span := max(minExtension, deadline.Sub(received))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(minExtendPause, time.Until(deadline)/2)):
		}
		// Overload retries stop at the ack deadline: an extension after it is of no use.
		wctx, wcancel := context.WithDeadline(ctx, deadline)
		req := &pb.ExtendDeadlineRequest{DeliveryId: job.DeliveryID, Extension: durationpb.New(span)}
		var r *pb.ExtendDeadlineResponse
		err := e.o.overload.do(wctx, func(o ...grpc.CallOption) (err error) {
			cctx, cancel := context.WithTimeout(outgoing(ctx, e.o.token), rpcTimeout)
			defer cancel()
			r, err = n.client.ExtendDeadline(cctx, req, o...)
			return err
		})
		wcancel()
		if err != nil {
			if !retryableCode(status.Code(err)) || time.Now().After(deadline) {
				return
			}
			continue
		}
		if t := r.GetAckDeadline(); t != nil {
			deadline = t.AsTime()
		}
	}
}

// acker sends one node's acks: one Ack when alone, AckBatch for those that queued meanwhile.
type acker struct {
	client   pb.ExecutorServiceClient
	token    string
	overload overloadRetry
	mu       sync.Mutex
	queue    []*pb.AckRequest
	closed   bool
	wake     chan struct{}
	calls    chan struct{}
	wg       sync.WaitGroup
	done     chan struct{}
	acked    atomic.Int64
	refused  atomic.Int64
}

func newAcker(c pb.ExecutorServiceClient, token string, overload overloadRetry) *acker {
	a := &acker{client: c, token: token, overload: overload, wake: make(chan struct{}, 1), calls: make(chan struct{}, ackCalls), done: make(chan struct{})}
	go a.run()
	return a
}

func (a *acker) put(r *pb.AckRequest) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return // after the drain: the node redelivers it
	}
	a.queue = append(a.queue, r)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *acker) run() {
	defer close(a.done)
	for {
		a.mu.Lock()
		if len(a.queue) == 0 {
			closed := a.closed
			a.mu.Unlock()
			if closed {
				a.wg.Wait()
				return
			}
			<-a.wake
			continue
		}
		k := min(len(a.queue), maxAckBatch)
		batch := append([]*pb.AckRequest(nil), a.queue[:k]...)
		a.queue = a.queue[k:]
		a.mu.Unlock()
		a.calls <- struct{}{}
		a.wg.Add(1)
		go func() {
			defer func() { <-a.calls; a.wg.Done() }()
			a.send(batch)
		}()
	}
}

func (a *acker) send(batch []*pb.AckRequest) {
	for attempt := 0; ; attempt++ {
		// RESOURCE_EXHAUSTED is retried here, after the node's hint, up to the overload bound.
		var r *pb.AckBatchResponse
		err := a.overload.do(context.Background(), func(o ...grpc.CallOption) (err error) {
			ctx, cancel := context.WithTimeout(outgoing(context.Background(), a.token), rpcTimeout)
			defer cancel()
			if len(batch) == 1 {
				_, err = a.client.Ack(ctx, batch[0], o...)
			} else {
				r, err = a.client.AckBatch(ctx, &pb.AckBatchRequest{Acks: batch}, o...)
			}
			return err
		})
		if err == nil {
			if len(batch) == 1 {
				a.acked.Add(1)
				return
			}
			for _, item := range r.GetResults() {
				if item.GetError() != nil {
					a.refused.Add(1)
					slog.Info("rebound: ack refused", "error", item.GetError().GetMessage())
				} else {
					a.acked.Add(1)
				}
			}
			return
		}
		// UNAVAILABLE and DEADLINE_EXCEEDED: a few more tries; RESOURCE_EXHAUSTED has had its
		// retries (within the overload bound) already.
		if code := status.Code(err); retryableCode(code) && code != codes.ResourceExhausted && attempt < 5 {
			time.Sleep(backoff(attempt))
			continue
		}
		// NOT_FOUND / FAILED_PRECONDITION: the delivery went to another executor.
		a.refused.Add(int64(len(batch)))
		slog.Info("rebound: ack not accepted", "error", err)
		return
	}
}

// close sends what is queued, waits for the calls out, and ends.
func (a *acker) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
	<-a.done
}
