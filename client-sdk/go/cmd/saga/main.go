// Command saga is a three-step order saga: reserve stock (done), charge the card (always
// declined here), ship (never reached). The charge is retried three times; then its
// compensations run in reverse order of the steps: void the card authorisation, then release
// the stock, each once.
//
//	go run ./cmd/saga 127.0.0.1:50051    (from client-sdk/go)
package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	rebound "github.com/rebound-dev/rebound/client-sdk/go"
)

func main() {
	addr := "127.0.0.1:50051"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	if err := run(addr); err != nil {
		fmt.Fprintln(os.Stderr, "saga:", err)
		os.Exit(1)
	}
}

func run(addr string) error {
	ctx := context.Background()
	c, err := rebound.New(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	order := fmt.Sprintf("order-%d", os.Getpid())
	// Step 1 reserved the stock; step 2, the charge, failed: retry it, and name what undoes
	// the steps before it, in the order to run them.
	_, err = c.Enqueue(ctx, "checkout", order+"/charge",
		rebound.Payload(fmt.Appendf(nil, `{"order": %q, "cents": 1200}`, order)),
		rebound.LastError("card network timeout"),
		rebound.WithPolicy(rebound.NewPolicy().MaxAttempts(3).InitialBackoff(200*time.Millisecond)),
		rebound.Delay(0),
		rebound.WithCompensation(rebound.NewCompensation("checkout", order+"/void-authorisation")),
		rebound.WithCompensation(rebound.NewCompensation("stock", order+"/release").Payload([]byte(order))))
	if err != nil {
		return err
	}

	// Each service's executor: the charge is declined every time; a compensation succeeds.
	var mu sync.Mutex
	var ran []string
	handler := func(_ context.Context, job *rebound.Job) rebound.Outcome {
		if strings.HasSuffix(job.TransactionID, "/charge") {
			fmt.Printf("charge attempt %d: declined\n", job.Attempt)
			return rebound.Retry("card declined")
		}
		fmt.Println("compensating:", job.TransactionID)
		mu.Lock()
		ran = append(ran, job.TransactionID)
		mu.Unlock()
		return rebound.Success()
	}
	runCtx, stop := context.WithCancel(ctx)
	var executors sync.WaitGroup
	for _, service := range []string{"checkout", "stock"} {
		ex := rebound.NewExecutor(addr, service, handler)
		executors.Go(func() {
			if err := ex.Run(runCtx); err != nil {
				fmt.Fprintln(os.Stderr, "executor:", err)
			}
		})
	}
	err = waitCompensated(ctx, c, order+"/charge")
	stop()
	executors.Wait()
	if err != nil {
		return err
	}
	// The executors have stopped: nothing writes ran any more.
	if want := []string{order + "/void-authorisation", order + "/release"}; !slices.Equal(ran, want) {
		return fmt.Errorf("compensations ran %q, want %q: in order, each once", ran, want)
	}
	return nil
}

// waitCompensated waits until the chain of the saga step checkout/txn says every compensation
// succeeded.
func waitCompensated(ctx context.Context, c *rebound.Client, txn string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		step, err := c.Get(ctx, "checkout", txn)
		if err != nil {
			return err
		}
		compensations := step.GetChain().GetCompensations()
		if len(compensations) == 0 {
			return fmt.Errorf("%s carries no compensations", txn)
		}
		done := true
		for _, m := range compensations {
			done = done && m.GetStatus() == rebound.Succeeded
		}
		if done {
			fmt.Printf("charge %v after %d attempts; saga compensated\n", step.GetStatus(), step.GetAttempt())
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the saga did not finish")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
