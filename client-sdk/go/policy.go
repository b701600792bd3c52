package rebound

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/rebound-dev/rebound/client-sdk/go/reboundv1"
)

// RetryPolicy overrides the service's retry policy on an enqueue. Fields left unset keep the
// service's (then the node's) default: 1 s initial backoff, x2, +/-20 % jitter, 5 attempts,
// 30 s ack timeout. Build one with NewPolicy and its setters:
//
//	rebound.NewPolicy().MaxAttempts(8).InitialBackoff(30 * time.Second)
type RetryPolicy struct{ p *pb.RetryPolicy }

// NewPolicy returns a policy that overrides nothing.
func NewPolicy() RetryPolicy { return RetryPolicy{p: &pb.RetryPolicy{}} }

func (r RetryPolicy) with(f func(*pb.RetryPolicy)) RetryPolicy {
	p := &pb.RetryPolicy{}
	if r.p != nil {
		p = cloneProto(r.p)
	}
	f(p)
	return RetryPolicy{p: p}
}

// MaxAttempts: total attempts, counting the caller's own first try.
func (r RetryPolicy) MaxAttempts(n uint32) RetryPolicy {
	return r.with(func(p *pb.RetryPolicy) { p.MaxAttempts = &n })
}

// InitialBackoff: the delay before the first retry.
func (r RetryPolicy) InitialBackoff(d time.Duration) RetryPolicy {
	return r.with(func(p *pb.RetryPolicy) { p.InitialBackoff = durationpb.New(d) })
}

// MaxBackoff caps any single delay.
func (r RetryPolicy) MaxBackoff(d time.Duration) RetryPolicy {
	return r.with(func(p *pb.RetryPolicy) { p.MaxBackoff = durationpb.New(d) })
}

// Multiplier: growth factor between attempts (at least 1).
func (r RetryPolicy) Multiplier(m float64) RetryPolicy {
	return r.with(func(p *pb.RetryPolicy) { p.Multiplier = &m })
}

// Jitter: random spread of each delay, a fraction in [0, 1].
func (r RetryPolicy) Jitter(j float64) RetryPolicy {
	return r.with(func(p *pb.RetryPolicy) { p.Jitter = &j })
}

// MaxRetryDuration stops retrying once this long has passed since the first enqueue.
func (r RetryPolicy) MaxRetryDuration(d time.Duration) RetryPolicy {
	return r.with(func(p *pb.RetryPolicy) { p.MaxRetryDuration = durationpb.New(d) })
}

// AckTimeout: how long an executor has to acknowledge a delivery.
func (r RetryPolicy) AckTimeout(d time.Duration) RetryPolicy {
	return r.with(func(p *pb.RetryPolicy) { p.AckTimeout = durationpb.New(d) })
}

// MaxDeliveriesPerAttempt: ack-deadline expiries one attempt may use.
func (r RetryPolicy) MaxDeliveriesPerAttempt(n uint32) RetryPolicy {
	return r.with(func(p *pb.RetryPolicy) { p.MaxDeliveriesPerAttempt = &n })
}

// NonRetryableErrorClasses: error classes that dead-letter a RETRY at once.
func (r RetryPolicy) NonRetryableErrorClasses(classes ...string) RetryPolicy {
	return r.with(func(p *pb.RetryPolicy) { p.NonRetryableErrorClasses = append([]string(nil), classes...) })
}

// UnlimitedAttempts retries with no limit on attempts (MaxRetryDuration still applies).
func (r RetryPolicy) UnlimitedAttempts() RetryPolicy {
	t := true
	return r.with(func(p *pb.RetryPolicy) { p.UnlimitedAttempts = &t })
}

// Proto returns the policy's message.
func (r RetryPolicy) Proto() *pb.RetryPolicy {
	if r.p == nil {
		return &pb.RetryPolicy{}
	}
	return cloneProto(r.p)
}
