// Package rebound is the Go client and executor runtime of Rebound, retry-as-a-service over
// gRPC.
//
// A producer that hits a transient failure hands the work to Rebound and goes back to
// serving traffic:
//
//	c, err := rebound.New("127.0.0.1:50051")
//	_, err = c.Enqueue(ctx, "payments", "charge-7f3a",
//		rebound.Payload([]byte(`{"order":"7f3a"}`)), rebound.Delay(30*time.Second),
//		rebound.WithPolicy(rebound.NewPolicy().MaxAttempts(8)))
//
// The service's workers run an Executor until their context ends:
//
//	ex := rebound.NewExecutor("127.0.0.1:50051", "payments",
//		func(ctx context.Context, job *rebound.Job) rebound.Outcome { return rebound.Success() })
//	err = ex.Run(ctx)
//
// The generated messages and clients are in the reboundv1 package.
package rebound

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"iter"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/rebound-dev/rebound/client-sdk/go/reboundv1"
)

func cloneProto[T proto.Message](m T) T { return proto.Clone(m).(T) }

// TLS configures a TLS channel: CAFile (PEM roots; empty: the system's), CertFile and KeyFile
// (a client certificate, for mutual TLS), ServerName (when it differs from the address).
type TLS struct {
	CAFile, CertFile, KeyFile, ServerName string
}

func (t TLS) config() (*tls.Config, error) {
	cfg := &tls.Config{ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: no certificate in %s", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, fmt.Errorf("tls: CertFile and KeyFile go together")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

type options struct {
	token    string
	tls      *TLS
	timeout  time.Duration
	dial     []grpc.DialOption
	overload overloadRetry
}

// Option configures a Client or an Executor.
type Option func(*options)

// WithToken sends `authorization: Bearer <token>` on every call.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithTLS uses a TLS channel (an https:// address implies TLS with the system's roots).
func WithTLS(t TLS) Option { return func(o *options) { o.tls = &t } }

// WithTimeout bounds each unary call whose context has no deadline (default 30 s), its
// retries after RESOURCE_EXHAUSTED (WithOverloadRetry) included.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithDialOptions adds gRPC dial options.
func WithDialOptions(d ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, d...) }
}

func collect(opts []Option) options {
	o := options{timeout: 30 * time.Second, overload: defaultOverloadRetry()}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// dial opens a channel to address (host:port, http://host:port or https://host:port).
func dial(address string, o options) (*grpc.ClientConn, error) {
	target := address
	t := o.tls
	switch {
	case strings.HasPrefix(address, "https://"):
		target = strings.TrimPrefix(address, "https://")
		if t == nil {
			t = &TLS{}
		}
	case strings.HasPrefix(address, "http://"):
		target = strings.TrimPrefix(address, "http://")
	}
	target = strings.TrimSuffix(target, "/")
	creds := insecure.NewCredentials()
	if t != nil {
		cfg, err := t.config()
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(cfg)
	}
	dialOpts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
	}, o.dial...)
	conn, err := grpc.NewClient(target, dialOpts...)
	if err != nil {
		return nil, wrap(err)
	}
	return conn, nil
}

// outgoing adds the bearer token and the caller's W3C trace context to ctx.
func outgoing(ctx context.Context, token string) context.Context {
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	for _, k := range []string{"traceparent", "tracestate"} {
		if v := carrier.Get(k); v != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, k, v)
		}
	}
	return ctx
}

// Client calls a node's RetryService. Safe for concurrent use; one per process is enough.
// A call the node answers RESOURCE_EXHAUSTED (it is overloaded: it shed the request before
// doing anything) is tried again after the node's `grpc-retry-pushback-ms` hint, within the
// bound of WithOverloadRetry (default 10 attempts, 30 s) and the call's deadline.
type Client struct {
	conn  *grpc.ClientConn
	retry pb.RetryServiceClient
	o     options
}

// New connects (lazily) to a node, or to a load balancer in front of several.
func New(address string, opts ...Option) (*Client, error) {
	o := collect(opts)
	conn, err := dial(address, o)
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn, retry: pb.NewRetryServiceClient(conn), o: o}, nil
}

// Close closes the channel.
func (c *Client) Close() error { return c.conn.Close() }

// RetryService is the generated client, for what this package does not wrap.
func (c *Client) RetryService() pb.RetryServiceClient { return c.retry }

func (c *Client) call(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx = outgoing(ctx, c.o.token)
	if _, ok := ctx.Deadline(); !ok && c.o.timeout > 0 {
		return context.WithTimeout(ctx, c.o.timeout)
	}
	return ctx, func() {}
}

// EnqueueOption sets a field of an enqueue.
type EnqueueOption func(*pb.EnqueueRetryRequest)

// Payload: opaque bytes handed back to the executor.
func Payload(p []byte) EnqueueOption { return func(r *pb.EnqueueRetryRequest) { r.Payload = p } }

// Delay: due this long from now (rounded up to the window grid).
func Delay(d time.Duration) EnqueueOption {
	return func(r *pb.EnqueueRetryRequest) {
		r.Schedule = &pb.EnqueueRetryRequest_Delay{Delay: durationpb.New(d)}
	}
}

// DueAt: due at t (rounded up to the window grid).
func DueAt(t time.Time) EnqueueOption {
	return func(r *pb.EnqueueRetryRequest) {
		r.Schedule = &pb.EnqueueRetryRequest_DueTime{DueTime: timestamppb.New(t)}
	}
}

// Attribute sets one attribute.
func Attribute(key, value string) EnqueueOption {
	return func(r *pb.EnqueueRetryRequest) {
		if r.Attributes == nil {
			r.Attributes = map[string]string{}
		}
		r.Attributes[key] = value
	}
}

// Attempt: the attempts the caller already made (default 1).
func Attempt(n uint32) EnqueueOption { return func(r *pb.EnqueueRetryRequest) { r.Attempt = n } }

// LastError: what the failed attempt said.
func LastError(e string) EnqueueOption { return func(r *pb.EnqueueRetryRequest) { r.LastError = e } }

// Dependency names the downstream dependency the retry waits on (e.g. "payments-gateway"):
// while it is held (a handler's Hold, or AdminService.HoldDependency), no retry naming it is
// delivered, in any service, and none uses an attempt.
func Dependency(name string) EnqueueOption {
	return func(r *pb.EnqueueRetryRequest) { r.Dependency = name }
}

// WithCompensation adds a compensation of this saga step, after those already added (give it
// once per compensation). When the retry ends DEAD (attempts or duration exhausted, FAILED, a
// non-retryable class), Rebound enqueues the first, and each next one only once the one before
// it was acknowledged SUCCEEDED; so add them in the order they must run (usually the reverse
// of the steps they undo). A retry that ends SUCCEEDED or CANCELLED runs none. At most 32,
// with at most REBOUND_MAX_PAYLOAD_BYTES of payloads in all.
func WithCompensation(c Compensation) EnqueueOption {
	return func(r *pb.EnqueueRetryRequest) { r.Compensations = append(r.Compensations, c.Proto()) }
}

// Compensation is a compensation of a saga step, for WithCompensation: a retry of its own, of
// service with the idempotency key transactionID, which that service's executors run like any
// other delivery (so its handler must be idempotent). Unless its WithPolicy says otherwise, it
// is retried with unlimited attempts for at most 24 hours, then dead-lettered for a human.
// Build one with NewCompensation and its setters:
//
//	rebound.NewCompensation("payments", "refund-7f3a").Payload([]byte(`{"order":"7f3a"}`))
type Compensation struct{ c *pb.Compensation }

// NewCompensation returns a compensation of service with the idempotency key transactionID.
func NewCompensation(service, transactionID string) Compensation {
	return Compensation{c: &pb.Compensation{Service: service, TransactionId: transactionID}}
}

func (c Compensation) with(f func(*pb.Compensation)) Compensation {
	m := &pb.Compensation{}
	if c.c != nil {
		m = cloneProto(c.c)
	}
	f(m)
	return Compensation{c: m}
}

// Payload: opaque bytes handed to the compensation's executor.
func (c Compensation) Payload(p []byte) Compensation {
	return c.with(func(m *pb.Compensation) { m.Payload = p })
}

// Attribute sets one attribute; a repeated key keeps the last value.
func (c Compensation) Attribute(key, value string) Compensation {
	return c.with(func(m *pb.Compensation) {
		if m.Attributes == nil {
			m.Attributes = map[string]string{}
		}
		m.Attributes[key] = value
	})
}

// WithPolicy overrides the compensation service's policy.
func (c Compensation) WithPolicy(p RetryPolicy) Compensation {
	return c.with(func(m *pb.Compensation) { m.Policy = p.Proto() })
}

// Proto returns a copy of the message this compensation is sent as.
func (c Compensation) Proto() *pb.Compensation {
	if c.c == nil {
		return &pb.Compensation{}
	}
	return cloneProto(c.c)
}

// WithPolicy overrides the service's retry policy.
func WithPolicy(p RetryPolicy) EnqueueOption {
	return func(r *pb.EnqueueRetryRequest) { r.Policy = p.Proto() }
}

// TraceContext carries the W3C trace context of the call that failed, when it is not the
// context's own (a batch item from another trace).
func TraceContext(traceparent, tracestate string) EnqueueOption {
	return func(r *pb.EnqueueRetryRequest) {
		r.TraceContext = &pb.TraceContext{Traceparent: traceparent, Tracestate: tracestate}
	}
}

// NewEnqueueRequest builds one enqueue, for EnqueueBatch.
func NewEnqueueRequest(service, transactionID string, opts ...EnqueueOption) *pb.EnqueueRetryRequest {
	r := &pb.EnqueueRetryRequest{Service: service, TransactionId: transactionID, Attempt: 1}
	for _, f := range opts {
		f(r)
	}
	return r
}

// Enqueued is the answer to an enqueue.
type Enqueued struct {
	TransactionID string
	// When the retry first becomes eligible for delivery (the end of its window).
	DueTime    time.Time
	Generation uint64
	// True when the transaction was already pending and this call rescheduled or confirmed it.
	Deduplicated bool
}

func enqueued(r *pb.EnqueueRetryResponse) *Enqueued {
	return &Enqueued{
		TransactionID: r.GetTransactionId(),
		DueTime:       timeOf(r.GetDueTime()),
		Generation:    r.GetGeneration(),
		Deduplicated:  r.GetDeduplicated(),
	}
}

func timeOf(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

// Enqueue schedules a retry. Idempotent by (service, transaction id): a repeat reschedules or
// confirms the pending retry (Deduplicated) and never doubles it.
func (c *Client) Enqueue(ctx context.Context, service, transactionID string, opts ...EnqueueOption) (*Enqueued, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	req := NewEnqueueRequest(service, transactionID, opts...)
	var r *pb.EnqueueRetryResponse
	err := c.o.overload.do(ctx, func(o ...grpc.CallOption) (err error) {
		r, err = c.retry.EnqueueRetry(ctx, req, o...)
		return err
	})
	if err != nil {
		return nil, wrap(err)
	}
	return enqueued(r), nil
}

// BatchResult is one item's result: Enqueued, or Err (the status it would have had alone).
type BatchResult struct {
	Enqueued *Enqueued
	Err      *Error
}

// EnqueueBatch sends many enqueues in one call; each item gets its own result, in order, and
// a bad item fails alone.
func (c *Client) EnqueueBatch(ctx context.Context, requests []*pb.EnqueueRetryRequest) ([]BatchResult, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	req := &pb.EnqueueRetryBatchRequest{Requests: requests}
	var r *pb.EnqueueRetryBatchResponse
	err := c.o.overload.do(ctx, func(o ...grpc.CallOption) (err error) {
		r, err = c.retry.EnqueueRetryBatch(ctx, req, o...)
		return err
	})
	if err != nil {
		return nil, wrap(err)
	}
	if len(r.GetResults()) != len(requests) {
		return nil, &Error{Code: codes.Internal, Message: fmt.Sprintf("%d results for %d batch items", len(r.GetResults()), len(requests))}
	}
	out := make([]BatchResult, len(r.GetResults()))
	for i, item := range r.GetResults() {
		if e := item.GetError(); e != nil {
			out[i].Err = &Error{Code: codeOf(e.GetCode()), Message: e.GetMessage()}
		} else {
			out[i].Enqueued = enqueued(item.GetResponse())
		}
	}
	return out, nil
}

// RetryStatus is a retry's state.
type RetryStatus = pb.RetryStatus

// The statuses of a retry.
const (
	Scheduled = pb.RetryStatus_RETRY_STATUS_SCHEDULED
	Succeeded = pb.RetryStatus_RETRY_STATUS_SUCCEEDED
	Dead      = pb.RetryStatus_RETRY_STATUS_DEAD
	Cancelled = pb.RetryStatus_RETRY_STATUS_CANCELLED
)

// Get returns the state of a retry (NOT_FOUND when there is none). For a saga step or a
// compensation, GetChain() tells where its compensation chain stands: the saga step
// (SagaService, SagaTransactionId), the retry's Position in it (0 for the step itself, k for
// the k-th compensation) and every compensation in order with its Status
// (RETRY_STATUS_UNSPECIFIED: not enqueued yet, or its record has expired); nil for a retry in
// no chain. GetCompensations() lists those still to run after this retry.
func (c *Client) Get(ctx context.Context, service, transactionID string) (*pb.Retry, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	req := &pb.GetRetryRequest{Service: service, TransactionId: transactionID}
	var r *pb.Retry
	err := c.o.overload.do(ctx, func(o ...grpc.CallOption) (err error) {
		r, err = c.retry.GetRetry(ctx, req, o...)
		return err
	})
	if err != nil {
		return nil, wrap(err)
	}
	return r, nil
}

// Cancel stops a pending retry; it returns the status after the call and whether this call
// cancelled it (false when it had already finished).
// ListFilter is what ListRetries filters on; every field set must match.
type ListFilter struct {
	// Every one of these attributes, with these values.
	Attributes map[string]string
	// A substring of the last error.
	ErrorContains string
	Dependency    string
	// A saga's step (by its own id) and its compensations.
	SagaTransactionID string
	// Due at or after, and before (zero: unbounded).
	DueAfter, DueBefore time.Time
	// Rows per call, 1-500 (0: the node's 100).
	PageSize uint32
}

// ListRetries yields the service's scheduled retries that match f, by due time,
// fetching a page at a time as the loop goes on:
//
//	for r, err := range c.ListRetries(ctx, "orders", rebound.ListFilter{ErrorContains: "declined"}) {
//		if err != nil { ... }
//	}
//
// An error ends the sequence.
func (c *Client) ListRetries(ctx context.Context, service string, f ListFilter) iter.Seq2[*pb.RetrySummary, error] {
	return func(yield func(*pb.RetrySummary, error) bool) {
		req := &pb.ListRetriesRequest{
			Service:           service,
			Attributes:        f.Attributes,
			ErrorContains:     f.ErrorContains,
			Dependency:        f.Dependency,
			SagaTransactionId: f.SagaTransactionID,
			PageSize:          f.PageSize,
		}
		if !f.DueAfter.IsZero() {
			req.DueAfter = timestamppb.New(f.DueAfter)
		}
		if !f.DueBefore.IsZero() {
			req.DueBefore = timestamppb.New(f.DueBefore)
		}
		for {
			page, err := c.listPage(ctx, req)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, r := range page.GetRetries() {
				if !yield(r, nil) {
					return
				}
			}
			if page.GetNextPageToken() == "" {
				return
			}
			req.PageToken = page.GetNextPageToken()
		}
	}
}

func (c *Client) listPage(ctx context.Context, req *pb.ListRetriesRequest) (*pb.ListRetriesResponse, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	var r *pb.ListRetriesResponse
	err := c.o.overload.do(ctx, func(o ...grpc.CallOption) (err error) {
		r, err = c.retry.ListRetries(ctx, req, o...)
		return err
	})
	if err != nil {
		return nil, wrap(err)
	}
	return r, nil
}

func (c *Client) Cancel(ctx context.Context, service, transactionID string) (RetryStatus, bool, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	req := &pb.CancelRetryRequest{Service: service, TransactionId: transactionID}
	var r *pb.CancelRetryResponse
	err := c.o.overload.do(ctx, func(o ...grpc.CallOption) (err error) {
		r, err = c.retry.CancelRetry(ctx, req, o...)
		return err
	})
	if err != nil {
		return 0, false, wrap(err)
	}
	return r.GetStatus(), r.GetCancelled(), nil
}
