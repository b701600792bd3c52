package rebound

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// pushbackKey is the metadata a node sets on a call it shed for overload (RESOURCE_EXHAUSTED
// before anything was decoded or written): how many milliseconds to wait before trying again.
const pushbackKey = "grpc-retry-pushback-ms"

// The defaults of WithOverloadRetry, and the backoff used when a refusal carries no hint.
const (
	defaultOverloadAttempts = 10
	defaultOverloadTotal    = 30 * time.Second
	overloadInitialBackoff  = 100 * time.Millisecond
	overloadMaxBackoff      = 5 * time.Second
	maxPushback             = time.Hour // a larger hint counts as an hour
)

// overloadRetry is the bound on the retries of calls a node answered RESOURCE_EXHAUSTED.
type overloadRetry struct {
	attempts int           // attempts in all, the first included; 1: none retried
	total    time.Duration // from the first attempt to the start of the last; 0: no bound
}

// WithOverloadRetry bounds how a Client (and, through ClientOptions, an Executor's acks and
// deadline extensions) retries a call the node answered RESOURCE_EXHAUSTED: at most
// maxAttempts attempts in all, the first included (default 10; 1 turns the retries off), and
// no retry that would start later than maxTotal after the first attempt (default 30 s; 0: no
// bound but the attempts). The call's context also bounds the retries: a wait that would pass
// its deadline is not started.
//
// The wait before a retry is the node's `grpc-retry-pushback-ms` hint (sent when it sheds a
// request for REBOUND_MAX_INFLIGHT_BYTES: nothing was done, so repeating is safe) times a
// random factor in [1, 1.5); without a usable hint (absent, malformed, negative or repeated),
// exponential backoff from 100 ms, doubling up to 5 s, ±20 % jitter. When the bound is
// reached the call returns its RESOURCE_EXHAUSTED *Error as it would have without retries. No
// other code is retried by this mechanism.
func WithOverloadRetry(maxAttempts int, maxTotal time.Duration) Option {
	return func(o *options) {
		o.overload = overloadRetry{attempts: max(1, maxAttempts), total: max(0, maxTotal)}
	}
}

func defaultOverloadRetry() overloadRetry {
	return overloadRetry{attempts: defaultOverloadAttempts, total: defaultOverloadTotal}
}

// pushback reads the hint from a refused call's metadata: ok is false when there is none or
// it is unusable (not one integer >= 0).
func pushback(mds ...metadata.MD) (time.Duration, bool) {
	for _, md := range mds {
		vals := md.Get(pushbackKey)
		if len(vals) == 0 {
			continue
		}
		if len(vals) != 1 {
			return 0, false
		}
		v := vals[0]
		if v == "" || strings.TrimLeft(v, "0123456789") != "" {
			return 0, false // not digits only: malformed, negative or signed
		}
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, false
		}
		return time.Duration(min(ms, maxPushback.Milliseconds())) * time.Millisecond, true
	}
	return 0, false
}

// overloadWait is the pause before retry number `retry` (1 for the first): the hint times
// [1, 1.5), or else 100 ms * 2^(retry-1), capped at 5 s, times [0.8, 1.2).
func overloadWait(retry int, hint time.Duration, hinted bool) time.Duration {
	if hinted {
		return time.Duration(float64(hint) * (1 + 0.5*rand.Float64()))
	}
	d := overloadMaxBackoff
	if retry <= 6 {
		d = min(d, overloadInitialBackoff<<(retry-1))
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// do runs call, and runs it again while it fails with RESOURCE_EXHAUSTED and the bound allows,
// after the node's hint or a backoff. call must pass the options it is given to the gRPC
// method (they collect the response metadata, where the hint is). ctx bounds the waits (a wait
// that would pass its deadline is not started, and its end stops one); it returns the last
// error as the call gave it.
func (b overloadRetry) do(ctx context.Context, call func(opts ...grpc.CallOption) error) error {
	start := time.Now()
	for attempt := 1; ; attempt++ {
		var header, trailer metadata.MD
		err := call(grpc.Header(&header), grpc.Trailer(&trailer))
		if err == nil || status.Code(err) != codes.ResourceExhausted || attempt >= b.attempts {
			return err
		}
		hint, hinted := pushback(trailer, header)
		wait := overloadWait(attempt, hint, hinted)
		if b.total > 0 && time.Since(start)+wait > b.total {
			return err
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= wait {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
