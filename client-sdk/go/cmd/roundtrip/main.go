// Command roundtrip is `scripts/sdk-roundtrip go ADDR SERVICE N`: it enqueues N retries due
// in about a second, runs an executor until all N are delivered, stops it (which sends every
// ack), asks the node for each retry's state (acked = SUCCEEDED) and prints
// "roundtrip: N enqueued, N delivered, N acked"; it exits 1 otherwise, within
// ROUNDTRIP_TIMEOUT seconds (default 120). REBOUND_TOKEN is sent when set.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rebound "github.com/rebound-dev/rebound/client-sdk/go"
	pb "github.com/rebound-dev/rebound/client-sdk/go/reboundv1"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: roundtrip ADDR SERVICE N")
		os.Exit(2)
	}
	addr, service := os.Args[1], os.Args[2]
	n, err := strconv.Atoi(os.Args[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, "N must be a number:", err)
		os.Exit(2)
	}
	limit := 120 * time.Second
	if s, err := strconv.Atoi(os.Getenv("ROUNDTRIP_TIMEOUT")); err == nil {
		limit = time.Duration(s) * time.Second
	}
	opts := []rebound.Option{}
	if t := os.Getenv("REBOUND_TOKEN"); t != "" {
		opts = append(opts, rebound.WithToken(t))
	}
	ctx := context.Background()
	c, err := rebound.New(addr, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	prefix := fmt.Sprintf("roundtrip-%x-", time.Now().UnixNano())
	enqueued := 0
	for start := 0; start < n; start += 500 {
		var batch []*pb.EnqueueRetryRequest
		for i := start; i < min(n, start+500); i++ {
			batch = append(batch, rebound.NewEnqueueRequest(service, fmt.Sprintf("%s%d", prefix, i),
				rebound.Payload([]byte("x")), rebound.Delay(time.Second)))
		}
		results, err := c.EnqueueBatch(ctx, batch)
		if err != nil {
			fmt.Fprintln(os.Stderr, "batch failed:", err)
			continue
		}
		for _, r := range results {
			if r.Err == nil {
				enqueued++
			}
		}
	}
	var mu sync.Mutex
	delivered := map[string]bool{}
	ex := rebound.NewExecutor(addr, service, func(ctx context.Context, job *rebound.Job) rebound.Outcome {
		if strings.HasPrefix(job.TransactionID, prefix) {
			mu.Lock()
			delivered[job.TransactionID] = true
			mu.Unlock()
		}
		return rebound.Success()
	}, rebound.Concurrency(64), rebound.ClientOptions(opts...))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ex.Run(runCtx) }()
	deadline := time.Now().Add(limit)
	finished := false
	for !finished && time.Now().Before(deadline) {
		mu.Lock()
		got := len(delivered)
		mu.Unlock()
		if got >= n {
			break
		}
		select {
		case err := <-done:
			fmt.Fprintln(os.Stderr, "executor:", err)
			finished = true
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	if !finished {
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "executor:", err)
		}
	}
	var acked atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			if r, err := c.Get(ctx, service, fmt.Sprintf("%s%d", prefix, i)); err == nil && r.GetStatus() == rebound.Succeeded {
				acked.Add(1)
			}
		}(i)
	}
	wg.Wait()
	mu.Lock()
	got := len(delivered)
	mu.Unlock()
	fmt.Printf("roundtrip: %d enqueued, %d delivered, %d acked\n", enqueued, got, acked.Load())
	if enqueued != n || got != n || acked.Load() < int64(n) {
		os.Exit(1)
	}
}
