// Command temporal is the Temporal baseline of Rebound's benchmark suite: a Temporal server
// on the same Cassandra as Rebound, driven through the Go SDK.
//
// One item is one workflow (its id is the item's transaction id) that runs one activity.
// It measures, against the server that bench/temporal/run starts:
//
//	(a) single starts (ExecuteWorkflow) at a fixed concurrency: throughput, p50/p99 latency.
//	    They start with a StartDelay of an hour on a task queue that no worker polls, so none
//	    of them runs during the run (the keyspace is dropped after it);
//	(b) Temporal has no batch start: enqueue_batch is null;
//	(c) N workflows all due at one instant T (StartDelay = T - now), worked by a no-op
//	    activity: completions/s from T to the last completion, lateness = activity start - T;
//	(d) retry: every activity fails its first attempt and succeeds on the second, after the
//	    activity retry policy's 100 ms initial interval;
//	(e) the steady phase of the suite: single starts paced at a fixed rate, each due 1-5 s
//	    after it is issued (StartDelay), worked by the same worker;
//
// with the CPU per item of every phase from /proc (Cassandra, the Temporal server, this
// process), and writes one JSON document in the suite's shared shape (see bench/README.md).
//
//	bench/temporal/run -n 2000 -out target/bench/temporal.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

const (
	workflowName = "bench-workflow"
	activityName = "bench-activity"
	enqueueQueue = "bench-enqueue" // (a): no worker polls this task queue
)

// Item is the input of every workflow: its phase, its number in the phase, and the instant it
// is due (unix nanoseconds), from which its activity computes its lateness.
type Item struct {
	Phase string `json:"phase"`
	Seq   int    `json:"seq"`
	Due   int64  `json:"due"`
}

// benchWorkflow runs the item's activity once (twice in the retry phase) and returns the
// item's key, which the completion interceptor reads from the completion command.
func benchWorkflow(ctx workflow.Context, it Item) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    100 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Second,
			MaximumAttempts:    2,
		},
	})
	if err := workflow.ExecuteActivity(ctx, activityName, it).Get(ctx, nil); err != nil {
		return "", err
	}
	return itemKey(it.Phase, it.Seq), nil
}

func itemKey(phase string, seq int) string { return phase + ":" + strconv.Itoa(seq) }

func parseKey(k string) (string, int, bool) {
	p, s, ok := strings.Cut(k, ":")
	if !ok {
		return "", 0, false
	}
	seq, err := strconv.Atoi(s)
	return p, seq, err == nil
}

// phase records what the worker and the server did with the items of one phase.
type phase struct {
	n      int
	flaky  bool           // (d): the activity fails its first attempt
	seen   []atomic.Bool  // the activity has started (first time)
	lateUS []atomic.Int64 // activity start - due, µs
	worked atomic.Int64
	fails  []atomic.Int32 // (d): failed first attempts
	second []atomic.Bool  // (d): succeeded on attempt 2
	done   []atomic.Bool  // the workflow's completion was acknowledged by the server
	nDone  atomic.Int64
	last   atomic.Int64 // unix nanoseconds of the last acknowledged completion
}

func newPhase(n int, flaky bool) *phase {
	return &phase{n: n, flaky: flaky, seen: make([]atomic.Bool, n), lateUS: make([]atomic.Int64, n),
		fails: make([]atomic.Int32, n), second: make([]atomic.Bool, n), done: make([]atomic.Bool, n)}
}

func (p *phase) lateness() []float64 {
	var v []float64
	for i := range p.seen {
		if p.seen[i].Load() {
			v = append(v, float64(p.lateUS[i].Load())/1000)
		}
	}
	sort.Float64s(v)
	return v
}

// recorder holds the phases; the map is built before the worker starts and only read after.
type recorder struct {
	phases map[string]*phase
	dc     converter.DataConverter
}

func (r *recorder) get(name string, seq int) *phase {
	p := r.phases[name]
	if p == nil || seq < 0 || seq >= p.n {
		return nil
	}
	return p
}

type activities struct{ rec *recorder }

// Run is the activity: a no-op that notes when it started, or in (d) fails its first attempt.
func (a *activities) Run(ctx context.Context, it Item) error {
	now := time.Now()
	p := a.rec.get(it.Phase, it.Seq)
	if p == nil {
		return nil
	}
	if p.flaky {
		switch activity.GetInfo(ctx).Attempt {
		case 1:
			p.fails[it.Seq].Add(1)
			return errors.New("bench: transient failure on the first attempt")
		case 2:
			p.second[it.Seq].Store(true)
		}
		return nil
	}
	if p.seen[it.Seq].CompareAndSwap(false, true) {
		p.lateUS[it.Seq].Store(now.Sub(time.Unix(0, it.Due)).Microseconds())
		p.worked.Add(1)
	}
	return nil
}

// intercept sees every call of the SDK's connection. A completion counts when the server has
// answered RespondWorkflowTaskCompleted with a CompleteWorkflowExecution command: the
// workflow's completion is then persisted.
func (r *recorder) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	rq, ok := req.(*workflowservice.RespondWorkflowTaskCompletedRequest)
	if err != nil || !ok {
		return err
	}
	now := time.Now().UnixNano()
	for _, c := range rq.GetCommands() {
		attrs := c.GetCompleteWorkflowExecutionCommandAttributes()
		if attrs == nil {
			continue
		}
		var k string
		if r.dc.FromPayloads(attrs.GetResult(), &k) != nil {
			continue
		}
		name, seq, ok := parseKey(k)
		if !ok {
			continue
		}
		if p := r.get(name, seq); p != nil && p.done[seq].CompareAndSwap(false, true) {
			p.nDone.Add(1)
			for {
				old := p.last.Load()
				if now <= old || p.last.CompareAndSwap(old, now) {
					break
				}
			}
		}
	}
	return nil
}

type config struct {
	n, conc, retryN                 int
	out, addr, namespace, taskQueue string
	lead, enqueueDelay              time.Duration
	steadyRate, steadySeconds       float64
	steadyWait                      float64
	cassandraPID, serverPID         int
	keyspace                        string
	shards                          int
	wfPollers, actPollers           int
	quiesceMax                      time.Duration
}

func main() {
	var c config
	flag.IntVar(&c.n, "n", 2000, "workflows in (a) and in the drain (c)")
	flag.IntVar(&c.conc, "concurrency", 32, "concurrent starts in (a), (c) and (d)")
	flag.StringVar(&c.out, "out", "", "write the JSON result here (default: stdout only)")
	flag.StringVar(&c.addr, "address", "127.0.0.1:7233", "the Temporal frontend")
	flag.StringVar(&c.namespace, "namespace", "bench", "the namespace (registered if missing)")
	flag.StringVar(&c.taskQueue, "task-queue", "bench", "the task queue of (c), (d) and the steady phase")
	flag.IntVar(&c.retryN, "retry-n", 200, "workflows in the retry run (d)")
	flag.DurationVar(&c.lead, "lead", 3*time.Second, "T of (c) = now + 2 x the estimated time of its starts + lead")
	flag.DurationVar(&c.enqueueDelay, "enqueue-delay", time.Hour, "StartDelay of the workflows of (a)")
	flag.Float64Var(&c.steadyRate, "steady-rate", 20, "starts per second of the steady phase")
	flag.Float64Var(&c.steadySeconds, "steady-seconds", 30, "how long the steady phase's pacer runs, seconds")
	flag.Float64Var(&c.steadyWait, "steady-wait-seconds", 120, "how long the steady phase waits for its items after the pacer stops, seconds")
	flag.IntVar(&c.cassandraPID, "cassandra-pid", 0, "Cassandra's pid, for its CPU (0: not counted)")
	flag.IntVar(&c.serverPID, "server-pid", 0, "the Temporal server's pid, for its CPU and memory (0: not counted)")
	flag.StringVar(&c.keyspace, "keyspace", "", "the server's Cassandra keyspace (reported only)")
	flag.IntVar(&c.shards, "history-shards", 0, "the server's numHistoryShards (reported only)")
	flag.IntVar(&c.wfPollers, "workflow-pollers", 8, "worker.Options.MaxConcurrentWorkflowTaskPollers (0: the SDK's default, 2)")
	flag.IntVar(&c.actPollers, "activity-pollers", 8, "worker.Options.MaxConcurrentActivityTaskPollers (0: the SDK's default, 2)")
	flag.DurationVar(&c.quiesceMax, "quiesce-max", 30*time.Second, "before each phase, wait at most this long for Cassandra and the server to be quiet")
	flag.Parse()
	if c.n < 1 || c.conc < 1 || c.retryN < 1 || c.steadyRate <= 0 || c.steadySeconds <= 0 {
		fmt.Fprintln(os.Stderr, "temporal bench: -n, -concurrency, -retry-n, -steady-rate and -steady-seconds must be above 0")
		os.Exit(2)
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "temporal bench:", err)
		os.Exit(1)
	}
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "temporal bench: "+format+"\n", a...)
}

// quietHandler passes the SDK's warnings and errors, except the activity failures that (d)
// causes on purpose.
type quietHandler struct{ slog.Handler }

func (h quietHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "Activity error." {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return quietHandler{h.Handler.WithAttrs(as)}
}

func (h quietHandler) WithGroup(g string) slog.Handler { return quietHandler{h.Handler.WithGroup(g)} }

func run(cfg config) error {
	wallStart := time.Now()
	ctx := context.Background()
	steadyTotal := int(math.Round(cfg.steadyRate * cfg.steadySeconds))
	rec := &recorder{dc: converter.GetDefaultDataConverter(), phases: map[string]*phase{
		"c": newPhase(cfg.n, false),
		"d": newPhase(cfg.retryN, true),
		"e": newPhase(steadyTotal, false),
	}}
	logger := sdklog.NewStructuredLogger(slog.New(quietHandler{
		slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})}))
	opts := client.Options{
		HostPort:  cfg.addr,
		Namespace: cfg.namespace,
		Logger:    logger,
		ConnectionOptions: client.ConnectionOptions{
			DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(rec.intercept)},
		},
	}

	serverVersion, err := registerNamespace(ctx, opts, cfg.namespace)
	if err != nil {
		return err
	}
	c, err := client.Dial(opts)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", cfg.addr, err)
	}
	defer c.Close()
	if err := probe(ctx, c, cfg); err != nil {
		return err
	}
	m := meter{cassandra: cfg.cassandraPID, server: cfg.serverPID, quiesceMax: cfg.quiesceMax}
	cass := cassandraInfo(cfg.cassandraPID)
	logf("Temporal server %s, namespace %q, Cassandra %s (pid %d), server pid %d",
		serverVersion, cfg.namespace, cass.version, cfg.cassandraPID, cfg.serverPID)
	failures := []string{}

	// (a) single starts at a fixed concurrency, delayed an hour on a task queue nobody polls.
	m.quiesce("(a)")
	logf("(a) %d workflow starts at concurrency %d (StartDelay %s, task queue %q: none runs)",
		cfg.n, cfg.conc, cfg.enqueueDelay, enqueueQueue)
	before := m.read()
	lat, singleSecs, err := startAll(ctx, c, cfg.n, cfg.conc, func(i int) (client.StartWorkflowOptions, Item) {
		return client.StartWorkflowOptions{ID: fmt.Sprintf("a-%d", i), TaskQueue: enqueueQueue, StartDelay: cfg.enqueueDelay},
			Item{Phase: "a", Seq: i}
	})
	singleCost := m.perItem(before, cfg.n)
	if err != nil {
		return fmt.Errorf("(a) start: %w", err)
	}
	singleRate := float64(cfg.n) / singleSecs
	single := map[string]any{
		"ops_per_sec": round(singleRate),
		"p50_ms":      num(pct(lat, 50)),
		"p99_ms":      num(pct(lat, 99)),
		"concurrency": cfg.conc,
		"seconds":     round(singleSecs),
		"start_delay": cfg.enqueueDelay.String(),
	}
	logf("(a) %.0f starts/s, p50 %.2f ms, p99 %.2f ms", singleRate, pct(lat, 50), pct(lat, 99))

	// The worker of (c), (d) and the steady phase: 8 workflow and 8 activity task pollers (the
	// SDK's 2 and 2 made the worker the bottleneck of the drain: 25 completions/s against 39
	// with 8), the SDK's defaults otherwise.
	wopts := worker.Options{MaxConcurrentWorkflowTaskPollers: cfg.wfPollers, MaxConcurrentActivityTaskPollers: cfg.actPollers}
	w := worker.New(c, cfg.taskQueue, wopts)
	w.RegisterWorkflowWithOptions(benchWorkflow, workflow.RegisterOptions{Name: workflowName})
	w.RegisterActivityWithOptions((&activities{rec: rec}).Run, activity.RegisterOptions{Name: activityName})
	if err := w.Start(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer w.Stop()

	// (c) N workflows due at one instant T, drained by the no-op activity.
	m.quiesce("(c)")
	pc := rec.phases["c"]
	estimate := time.Duration(float64(cfg.n) / singleRate * 2 * float64(time.Second))
	due := time.Now().Add(estimate + cfg.lead).Truncate(time.Millisecond)
	logf("(c) %d workflows due at one instant T, %.1f s ahead (StartDelay = T - now)", cfg.n, time.Until(due).Seconds())
	before = m.read()
	clat, cSecs, err := startAll(ctx, c, cfg.n, cfg.conc, func(i int) (client.StartWorkflowOptions, Item) {
		return client.StartWorkflowOptions{ID: fmt.Sprintf("c-%d", i), TaskQueue: cfg.taskQueue, StartDelay: max(time.Until(due), 0)},
			Item{Phase: "c", Seq: i, Due: due.UnixNano()}
	})
	drainStartCost := m.perItem(before, cfg.n)
	if err != nil {
		return fmt.Errorf("(c) start: %w", err)
	}
	startsEnded := time.Now()
	beforeDue := startsEnded.Before(due)
	if !beforeDue {
		logf("(c) warning: the starts ended %.1f s after T", startsEnded.Sub(due).Seconds())
	}
	time.Sleep(time.Until(due))
	before = m.read()
	waitFor(pc, cfg.n, time.Until(due)+120*time.Second+time.Duration(cfg.n/10)*time.Second)
	drainCost := m.perItem(before, cfg.n)
	completed := int(pc.nDone.Load())
	drainSecs := time.Unix(0, pc.last.Load()).Sub(due).Seconds()
	if completed < cfg.n {
		failures = append(failures, fmt.Sprintf("(c) only %d of %d workflows completed", completed, cfg.n))
	}
	lv := pc.lateness()
	drain := map[string]any{
		"acked_per_sec":            num(float64(completed) / drainSecs),
		"n":                        cfg.n,
		"completed":                completed,
		"seconds":                  round(drainSecs),
		"inserted_before_due":      beforeDue,
		"starts_ended_ms_before_t": round(float64(due.Sub(startsEnded).Microseconds()) / 1000),
		"starts_per_sec":           round(float64(cfg.n) / cSecs),
		"start_p50_ms":             num(pct(clat, 50)),
		"start_p99_ms":             num(pct(clat, 99)),
		"start_cost_per_item":      drainStartCost,
		"clock": "T to the last completion: the moment the server answered the worker's RespondWorkflowTaskCompleted " +
			"carrying the workflow's CompleteWorkflowExecution command (the completion is persisted then)",
	}
	lateRes := map[string]any{"p50": num(pct(lv, 50)), "p99": num(pct(lv, 99)), "max": num(pct(lv, 100)), "samples": len(lv)}
	logf("(c) %d completed %.2f s after T: %.1f completions/s; lateness p50 %.0f ms, p99 %.0f ms, max %.0f ms",
		completed, drainSecs, float64(completed)/drainSecs, pct(lv, 50), pct(lv, 99), pct(lv, 100))

	// (d) retry: the activity fails its first attempt, the retry policy retries it 100 ms later.
	m.quiesce("(d)")
	pd := rec.phases["d"]
	logf("(d) %d workflows whose activity fails its first attempt (retried after 100 ms)", cfg.retryN)
	before = m.read()
	t0 := time.Now()
	if _, _, err := startAll(ctx, c, cfg.retryN, cfg.conc, func(i int) (client.StartWorkflowOptions, Item) {
		return client.StartWorkflowOptions{ID: fmt.Sprintf("d-%d", i), TaskQueue: cfg.taskQueue}, Item{Phase: "d", Seq: i}
	}); err != nil {
		return fmt.Errorf("(d) start: %w", err)
	}
	waitFor(pd, cfg.retryN, 120*time.Second)
	retrySecs := time.Since(t0).Seconds()
	retryCost := m.perItem(before, cfg.retryN)
	onSecond, failed := 0, 0
	for i := 0; i < cfg.retryN; i++ {
		failed += int(pd.fails[i].Load())
		if pd.fails[i].Load() == 1 && pd.second[i].Load() && pd.done[i].Load() {
			onSecond++
		}
	}
	retryOK := onSecond == cfg.retryN
	if !retryOK {
		failures = append(failures, "(d) not every workflow completed after exactly one failed attempt")
	}
	logf("(d) %d/%d completed on attempt 2 after %d failed attempts in %.2f s: retry_ok=%v",
		onSecond, cfg.retryN, failed, retrySecs, retryOK)

	// (e) the steady phase.
	m.quiesce("steady")
	steady, steadyCost, err := steadyPhase(ctx, c, rec.phases["e"], m, cfg)
	if err != nil {
		return err
	}

	visibility := countCompleted(ctx, c, completed+int(pd.nDone.Load())+int(rec.phases["e"].nDone.Load()))
	hwm := kbField(fmt.Sprintf("/proc/%d/status", cfg.serverPID), "VmHWM:")
	sdkVersion := modVersion("go.temporal.io/sdk")
	res := map[string]any{
		"system":  "temporal",
		"version": fmt.Sprintf("Temporal server %s, Go SDK %s, Cassandra %s", serverVersion, sdkVersion, cass.version),
		"guarantees": cass.guarantees() + "; Temporal: a started workflow is persisted before the start returns, " +
			"its activity runs at least once (again after a timeout or a failure), its completion is recorded once",
		"n":                  cfg.n,
		"enqueue_single":     single,
		"enqueue_batch":      nil,
		"enqueue_batch_note": "Temporal has no batch start (each workflow is started by its own StartWorkflowExecution call)",
		"drain":              drain,
		"lateness_ms":        lateRes,
		"retry_ok":           retryOK,
		"retry": map[string]any{"n": cfg.retryN, "completed_on_attempt_2": onSecond, "failed_attempts": failed,
			"completed": pd.nDone.Load(), "seconds": round(retrySecs),
			"backoff": "activity RetryPolicy: InitialInterval 100 ms, BackoffCoefficient 2, MaximumAttempts 2"},
		"steady": steady,
		"cost_per_item": map[string]any{
			"enqueue_single": singleCost,
			"enqueue_batch":  nil,
			"delivery_cycle": drainCost,
			"steady":         steadyCost,
			"retry":          retryCost,
		},
		"cost_method": "CPU (utime+stime, and cutime+cstime for exited children) from /proc/PID/stat over each phase, " +
			"x 1e6 / items: cassandra = the Cassandra process, temporal_server = the Temporal server process (each with " +
			"its descendants), server = both, client = this process (starter and worker); delivery_cycle from T to the " +
			"last completion, per workflow drained; retry from the first start to the last completion, per workflow",
		"peak_rss_mb": num(hwm / 1024),
		"peak_rss_method": "VmHWM of the Temporal server process (frontend, history, matching and worker services in one " +
			"process, started for this run), read at the end of the run; Cassandra's memory is not counted",
		"completed_in_visibility": visibility,
		"server": fmt.Sprintf("Temporal server %s on Cassandra %s (keyspace %s), visibility on SQLite in memory",
			serverVersion, cass.version, cfg.keyspace),
		"config": map[string]any{
			"history_shards": cfg.shards, "namespace": cfg.namespace, "task_queue": cfg.taskQueue,
			"concurrency": cfg.conc, "retry_n": cfg.retryN, "lead_ms": cfg.lead.Milliseconds(),
			"enqueue_start_delay_s": cfg.enqueueDelay.Seconds(), "keyspace": cfg.keyspace,
			"workflow_task_pollers": orDefault(cfg.wfPollers), "activity_task_pollers": orDefault(cfg.actPollers),
			"worker": "go.temporal.io/sdk worker.Options defaults otherwise", "dynamic_config": "none (server defaults)",
			"activity_start_to_close_s": 30, "cassandra_commitlog_sync": cass.commitlog,
			"cassandra_skip_sync": cass.skipSync,
		},
		"started_at": wallStart.UTC().Format(time.RFC3339),
	}
	res["wall_seconds"] = round(time.Since(wallStart).Seconds())
	doc, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	fmt.Println(string(doc))
	if cfg.out != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.out), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(cfg.out, append(doc, '\n'), 0o644); err != nil {
			return err
		}
		logf("wrote %s (wall %.1f s)", cfg.out, time.Since(wallStart).Seconds())
	}
	if len(failures) > 0 {
		return errors.New(strings.Join(failures, "; "))
	}
	return nil
}

func orDefault(v int) any {
	if v == 0 {
		return "SDK default"
	}
	return v
}

// registerNamespace registers the namespace (retention one day) once the frontend answers,
// and returns the server's version.
func registerNamespace(ctx context.Context, opts client.Options, ns string) (string, error) {
	deadline := time.Now().Add(90 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		nc, err := client.NewNamespaceClient(opts)
		if err == nil {
			err = nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{
				Namespace:                        ns,
				WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
			})
			var exists *serviceerror.NamespaceAlreadyExists
			if err == nil || errors.As(err, &exists) {
				var version string
				if c, err := client.Dial(opts); err == nil {
					if info, err := c.WorkflowService().GetSystemInfo(ctx, &workflowservice.GetSystemInfoRequest{}); err == nil {
						version = info.GetServerVersion()
					}
					c.Close()
				}
				nc.Close()
				if version == "" {
					version = "unknown"
				} else if !strings.HasPrefix(version, "v") {
					version = "v" + version
				}
				return version, nil
			}
			nc.Close()
		}
		last = err
		time.Sleep(time.Second)
	}
	return "", fmt.Errorf("register namespace %q: %w", ns, last)
}

// probe starts one workflow (delayed an hour, on the unpolled queue) until the namespace is
// known to every service.
func probe(ctx context.Context, c client.Client, cfg config) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "probe", TaskQueue: enqueueQueue,
			StartDelay: cfg.enqueueDelay}, workflowName, Item{Phase: "probe"})
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if err == nil || errors.As(err, &started) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the first start: %w", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// startAll starts n workflows from conc goroutines and returns the sorted latencies (ms) of
// the calls and the seconds they took together.
func startAll(ctx context.Context, c client.Client, n, conc int, mk func(int) (client.StartWorkflowOptions, Item)) ([]float64, float64, error) {
	lat := make([]float64, n)
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	t0 := time.Now()
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				o, it := mk(i)
				s := time.Now()
				_, err := c.ExecuteWorkflow(ctx, o, workflowName, it)
				lat[i] = float64(time.Since(s).Microseconds()) / 1000
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(t0).Seconds()
	sort.Float64s(lat)
	return lat, secs, firstErr
}

// waitFor waits until n workflows of the phase have completed, or the timeout.
func waitFor(p *phase, n int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for int(p.nDone.Load()) < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// steadyPhase paces single starts at the rate, each due 1-5 s after it is issued (the same
// xorshift64* sequence, seed 1, as the other systems), and waits until they are worked.
func steadyPhase(ctx context.Context, c client.Client, p *phase, m meter, cfg config) (map[string]any, map[string]any, error) {
	total := p.n
	logf("steady: %d single starts at %g/s, each due 1-5 s after it is issued", total, cfg.steadyRate)
	before := m.read()
	var accepted, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	x := uint64(1)
	var maxLag time.Duration
	for i := 0; i < total; i++ {
		at := start.Add(time.Duration(float64(i) / cfg.steadyRate * float64(time.Second)))
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		maxLag = max(maxLag, time.Since(at))
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		delay := time.Duration(1000+(x*0x2545F4914F6CDD1D>>11)%4001) * time.Millisecond
		due := time.Now().Add(delay)
		wg.Add(1)
		go func(i int, due time.Time) {
			defer wg.Done()
			_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("e-%d", i), TaskQueue: cfg.taskQueue,
				StartDelay: max(time.Until(due), 0)}, workflowName, Item{Phase: "e", Seq: i, Due: due.UnixNano()})
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			accepted.Add(1)
		}(i, due)
	}
	pacerEnd := time.Now()
	wg.Wait()
	inserted := int(accepted.Load())
	if failed.Load() > 0 {
		logf("steady: %d starts failed (first: %v)", failed.Load(), firstErr.Load())
	}
	deadline := pacerEnd.Add(time.Duration(cfg.steadyWait * float64(time.Second)))
	for (int(p.worked.Load()) < inserted || int(p.nDone.Load()) < inserted) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	end := time.Now()
	timedOut := int(p.worked.Load()) < inserted || int(p.nDone.Load()) < inserted
	cost := m.perItem(before, inserted)
	lv := p.lateness()
	early := 0
	for _, v := range lv {
		if v < 0 {
			early++
		}
	}
	res := map[string]any{
		"rate_offered":     cfg.steadyRate,
		"seconds":          cfg.steadySeconds,
		"n":                inserted,
		"delivered":        len(lv),
		"completed":        p.nDone.Load(),
		"start_errors":     failed.Load(),
		"pacer_seconds":    round(pacerEnd.Sub(start).Seconds()),
		"pacer_max_lag_ms": round(float64(maxLag.Microseconds()) / 1000),
		"seconds_to_end":   round(end.Sub(start).Seconds()),
		"timed_out":        timedOut,
		"delay_s":          []int{1, 5},
		"lateness_ms":      map[string]any{"p50": num(pct(lv, 50)), "p99": num(pct(lv, 99)), "max": num(pct(lv, 100)), "min": num(pct(lv, 0))},
		"early":            early,
		"cost_per_item":    cost,
	}
	logf("steady: %d of %d worked, %d completed; lateness p50 %.0f ms, p99 %.0f ms, max %.0f ms, min %.0f ms",
		len(lv), inserted, p.nDone.Load(), pct(lv, 50), pct(lv, 99), pct(lv, 100), pct(lv, 0))
	return res, cost, nil
}

// countCompleted asks the visibility store how many workflows completed (it is updated
// asynchronously: a few seconds are allowed for it to catch up with want).
func countCompleted(ctx context.Context, c client.Client, want int) any {
	var got int64
	for i := 0; i < 30; i++ {
		r, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: "ExecutionStatus = 'Completed'"})
		if err != nil {
			return "error: " + err.Error()
		}
		got = r.GetCount()
		if int(got) >= want {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	return got
}

// --- CPU from /proc ----------------------------------------------------------------------------

// meter reads the CPU (seconds) of Cassandra, the Temporal server and this process, each with
// its descendants, the way Rebound's harness does (utime + stime, 100 ticks a second).
type meter struct {
	cassandra, server int
	quiesceMax        time.Duration
}

type reading struct{ cassandra, server, client float64 }

func (m meter) read() reading {
	procs := allProcs()
	return reading{cassandra: treeCPU(procs, m.cassandra), server: treeCPU(procs, m.server), client: treeCPU(procs, os.Getpid())}
}

// perItem is the CPU per item (µs) of what happened since b.
func (m meter) perItem(b reading, items int) map[string]any {
	a := m.read()
	n := float64(max(items, 1))
	us := func(after, before float64) float64 { return round((after - before) * 1e6 / n) }
	res := map[string]any{"client_cpu_us": us(a.client, b.client)}
	var server float64
	have := true
	if m.cassandra > 0 {
		res["cassandra_cpu_us"] = us(a.cassandra, b.cassandra)
		server += a.cassandra - b.cassandra
	} else {
		res["cassandra_cpu_us"], have = nil, false
	}
	if m.server > 0 {
		res["temporal_server_cpu_us"] = us(a.server, b.server)
		server += a.server - b.server
	} else {
		res["temporal_server_cpu_us"], have = nil, false
	}
	if have {
		res["server_cpu_us"] = round(server * 1e6 / n)
		res["total_cpu_us"] = round((server + a.client - b.client) * 1e6 / n)
	} else {
		res["server_cpu_us"], res["total_cpu_us"] = nil, nil
	}
	return res
}

// quiesce waits (at most quiesceMax, 30 s by default) until Cassandra and the Temporal server together use under
// 0.3 of a core over a second, as Rebound's harness waits for Cassandra before each system.
func (m meter) quiesce(what string) {
	if m.cassandra == 0 && m.server == 0 {
		return
	}
	t0 := time.Now()
	var cass, server float64
	for time.Since(t0) < m.quiesceMax {
		a := m.read()
		time.Sleep(time.Second)
		b := m.read()
		cass, server = b.cassandra-a.cassandra, b.server-a.server
		if cass+server < 0.3 {
			logf("%s: Cassandra and the server quiet after %.1f s", what, time.Since(t0).Seconds())
			return
		}
	}
	logf("%s: not quiet after %.1f s (the last second: Cassandra %.2f, the server %.2f of a core)",
		what, time.Since(t0).Seconds(), cass, server)
}

type procStat struct {
	ppid          int
	own, children float64 // seconds: utime+stime, cutime+cstime
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return procStat{}, false
	}
	v := func(i int) float64 { x, _ := strconv.ParseFloat(f[i], 64); return x }
	ppid, _ := strconv.Atoi(f[1])
	return procStat{ppid: ppid, own: (v(11) + v(12)) / 100, children: (v(13) + v(14)) / 100}, true
}

func allProcs() map[int]procStat {
	procs := map[int]procStat{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			procs[pid] = st
		}
	}
	return procs
}

// treeCPU is the CPU of root and all its descendants, plus what root's exited children used.
func treeCPU(procs map[int]procStat, root int) float64 {
	r, ok := procs[root]
	if root <= 0 || !ok {
		return 0
	}
	kids := map[int][]int{}
	for pid, st := range procs {
		kids[st.ppid] = append(kids[st.ppid], pid)
	}
	total := r.children
	stack := []int{root}
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		total += procs[pid].own
		stack = append(stack, kids[pid]...)
	}
	return total
}

// --- Cassandra's version and durability, from its command line and configuration ---------------

type cassInfo struct {
	version, commitlog string
	skipSync           bool
}

func cassandraInfo(pid int) cassInfo {
	info := cassInfo{version: "unknown", commitlog: "unknown"}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return info
	}
	cmd := strings.ReplaceAll(string(b), "\x00", " ")
	if m := regexp.MustCompile(`cassandra-(\d+\.\d+\.\d+)/lib`).FindStringSubmatch(cmd); m != nil {
		info.version = m[1]
	}
	info.skipSync = strings.Contains(cmd, "-Dcassandra.skip_sync=true")
	if m := regexp.MustCompile(`-Dcassandra\.config=file://(\S+)`).FindStringSubmatch(cmd); m != nil {
		if y, err := os.ReadFile(m[1]); err == nil {
			mode, period := "", ""
			for _, line := range strings.Split(string(y), "\n") {
				k, v, _ := strings.Cut(line, ":")
				switch strings.TrimSpace(k) {
				case "commitlog_sync":
					mode = strings.TrimSpace(v)
				case "commitlog_sync_period", "commitlog_sync_period_in_ms":
					period = strings.TrimSpace(v)
				}
			}
			if mode != "" {
				info.commitlog = strings.TrimSpace(mode + " " + period)
			}
		}
	}
	return info
}

func (c cassInfo) guarantees() string {
	if c.skipSync {
		return "Cassandra runs with cassandra.skip_sync=true (no fsync of the commit log): an acknowledged start " +
			"survives a crash of Cassandra, not of the OS"
	}
	if strings.HasPrefix(c.commitlog, "periodic") {
		return "Cassandra commitlog_sync " + c.commitlog + ": an acknowledged start is in the commit log, fsynced " +
			"periodically, so an OS crash or power loss can lose the last period of them"
	}
	return "Cassandra commitlog_sync " + c.commitlog
}

// --- helpers -----------------------------------------------------------------------------------

// pct is the nearest-rank percentile of sorted values; 100 is the maximum, 0 the minimum.
func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(k, len(sorted)-1))]
}

func round(v float64) float64 { return math.Round(v*100) / 100 }

// num is a rounded number, or null for NaN and infinities (which JSON cannot hold).
func num(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return round(v)
}

func modVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "unknown"
}

func kbField(path, key string) float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return math.NaN()
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, key) {
			if f := strings.Fields(line[len(key):]); len(f) > 0 {
				v, _ := strconv.ParseFloat(f[0], 64)
				return v
			}
		}
	}
	return math.NaN()
}
