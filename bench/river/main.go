// Command river is the River (Postgres job queue) baseline of Rebound's benchmark suite.
//
// It measures, against the private Postgres that scripts/bench-deps starts:
//
//	(a) single inserts (Client.Insert) at a fixed concurrency: throughput, p50/p99 latency;
//	(b) batch inserts (Client.InsertMany, batches of 500): throughput;
//	(c) delayed jobs: N jobs scheduled for one due time a few seconds ahead, drained by a
//	    no-op worker (MaxWorkers 100): completed jobs/s from the due time to the last
//	    persisted completion, and lateness = worker start - scheduled time (p50, p99, max);
//	(s) steady: single inserts paced at -steady-rate/s for -steady-seconds, each due 1-5 s
//	    after its insert is issued, worked by the same client as (c): lateness (p50, p99,
//	    max, min) and how many ran early;
//	(d) retry with backoff: every job fails its first attempt and succeeds on the second.
//
// and the CPU per item of (a), (b), (c) and (s), of the Postgres server (the postmaster and
// all its descendants) and of this process, from /proc. It writes one JSON document in the
// suite's shared shape (see bench/README.md).
//
//	bench/river/run -n 20000 -concurrency 32 -out target/bench/river.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

type pgxTx = pgx.Tx

const (
	enqueueQueue = "bench_enqueue" // (a) and (b): no client works this queue
	drainQueue   = river.QueueDefault
)

// NoopArgs is the job of (a), (b), (c) and the steady phase.
type NoopArgs struct {
	Seq int `json:"seq"`
}

func (NoopArgs) Kind() string { return "bench_noop" }

// FlakyArgs is the job of (d): fails its first attempt.
type FlakyArgs struct {
	Seq int `json:"seq"`
}

func (FlakyArgs) Kind() string { return "bench_flaky" }

// lateness records, for each job the worker starts, start time - scheduled time.
type lateness struct {
	vals []float64 // milliseconds
	next atomic.Int64
}

func (l *lateness) add(ms float64) {
	i := l.next.Add(1) - 1
	if int(i) < len(l.vals) {
		l.vals[i] = ms
	}
}

// steadyLateness records the lateness of the steady phase's jobs by their Seq, once per job
// (a job run a second time, which at-least-once execution allows, keeps its first start).
type steadyLateness struct {
	vals   []float64 // milliseconds, by Seq
	seen   []atomic.Bool
	worked atomic.Int64 // distinct jobs started
}

func newSteadyLateness(n int) *steadyLateness {
	return &steadyLateness{vals: make([]float64, n), seen: make([]atomic.Bool, n)}
}

func (l *steadyLateness) add(seq int, ms float64) {
	if seq >= 0 && seq < len(l.vals) && l.seen[seq].CompareAndSwap(false, true) {
		l.vals[seq] = ms
		l.worked.Add(1)
	}
}

// NoopWorker records into the drain's recorder, or into the steady phase's once it is set
// (after the drain has completed every one of its jobs).
type NoopWorker struct {
	river.WorkerDefaults[NoopArgs]
	late   *lateness
	steady atomic.Pointer[steadyLateness]
}

func (w *NoopWorker) Work(_ context.Context, job *river.Job[NoopArgs]) error {
	ms := float64(time.Since(job.ScheduledAt).Microseconds()) / 1000
	if s := w.steady.Load(); s != nil {
		s.add(job.Args.Seq, ms)
		return nil
	}
	w.late.add(ms)
	return nil
}

type FlakyWorker struct {
	river.WorkerDefaults[FlakyArgs]
}

func (w *FlakyWorker) Work(_ context.Context, job *river.Job[FlakyArgs]) error {
	if job.Attempt == 1 {
		return errors.New("bench: transient failure on the first attempt")
	}
	return nil
}

// shortRetry retries after 100 ms * 2^(attempt-1), like BullMQ's exponential backoff with
// delay 100 in bench/bullmq, instead of River's default attempt^4 seconds.
type shortRetry struct{}

func (shortRetry) NextRetry(job *rivertype.JobRow) time.Time {
	return time.Now().Add(time.Duration(100*math.Pow(2, float64(job.Attempt-1))) * time.Millisecond)
}

type result struct {
	System        string         `json:"system"`
	Version       string         `json:"version"`
	Guarantees    string         `json:"guarantees"`
	N             int            `json:"n"`
	EnqueueSingle map[string]any `json:"enqueue_single"`
	EnqueueBatch  map[string]any `json:"enqueue_batch"`
	Drain         map[string]any `json:"drain"`
	LatenessMs    map[string]any `json:"lateness_ms"`
	RetryOK       bool           `json:"retry_ok"`
	Retry         map[string]any `json:"retry"`
	Steady        map[string]any `json:"steady"`
	CostPerItem   map[string]any `json:"cost_per_item"`
	CostMethod    string         `json:"cost_method"`
	PeakRSSMB     float64        `json:"peak_rss_mb"`
	PeakRSSMethod string         `json:"peak_rss_method"`
	PeakHWMSumMB  float64        `json:"peak_rss_hwm_sum_mb"`
	Server        string         `json:"server"`
	Config        map[string]any `json:"config"`
	WallSeconds   float64        `json:"wall_seconds"`
	StartedAt     string         `json:"started_at"`
}

func main() {
	n := flag.Int("n", 20000, "jobs per phase (a), (b), (c)")
	conc := flag.Int("concurrency", 32, "concurrent single inserts in (a)")
	out := flag.String("out", "", "write the JSON result here (default: stdout only)")
	dbURL := flag.String("database-url", envOr("RIVER_DATABASE_URL",
		"postgres://rebound@127.0.0.1:15432/river?sslmode=disable"), "Postgres URL")
	batch := flag.Int("batch", 500, "jobs per InsertMany in (b) and (c)")
	workers := flag.Int("workers", 100, "MaxWorkers of the draining queue in (c) and (d)")
	retryN := flag.Int("retry-n", 200, "jobs in the retry run (d)")
	lead := flag.Duration("lead", 3*time.Second, "due time of (c) = now + 2 x the estimated time of its inserts + lead")
	poll := flag.Duration("fetch-poll-interval", river.FetchPollIntervalDefault,
		"River's FetchPollInterval (default: River's default)")
	cooldown := flag.Duration("fetch-cooldown", river.FetchCooldownDefault,
		"River's FetchCooldown (default: River's default)")
	profile := flag.String("profile", "default", "default: River's client defaults with -workers; "+
		"tuned: the settings of River's own benchmark (riverbench): MaxWorkers 2000, FetchCooldown 2ms, "+
		"FetchPollInterval 20ms, reported as system \"river-tuned\"")
	steadyRate := flag.Float64("steady-rate", 500, "single inserts per second in the steady phase")
	steadySecs := flag.Float64("steady-seconds", 30, "how long the steady phase's pacer runs")
	flag.Parse()
	if *steadyRate <= 0 || *steadySecs <= 0 {
		fmt.Fprintln(os.Stderr, "river bench: -steady-rate and -steady-seconds must be positive")
		os.Exit(2)
	}

	system := "river"
	switch *profile {
	case "default":
	case "tuned":
		system = "river-tuned"
		*workers, *cooldown, *poll = 2000, 2*time.Millisecond, 20*time.Millisecond
	default:
		fmt.Fprintln(os.Stderr, "river bench: -profile must be default or tuned")
		os.Exit(2)
	}

	cfg := benchConfig{system: system, profile: *profile, workers: *workers, batch: *batch, retryN: *retryN,
		lead: *lead, poll: *poll, cooldown: *cooldown, steadyRate: *steadyRate, steadySecs: *steadySecs}
	if err := run(*n, *conc, *out, *dbURL, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "river bench:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "river bench: "+format+"\n", a...)
}

type benchConfig struct {
	system, profile        string
	workers, batch, retryN int
	lead, poll, cooldown   time.Duration
	steadyRate, steadySecs float64
}

func run(n, conc int, out, dbURL string, cfg benchConfig) error {
	workers, batch, retryN, lead, poll := cfg.workers, cfg.batch, cfg.retryN, cfg.lead, cfg.poll
	wallStart := time.Now()
	ctx := context.Background()

	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	pcfg.MaxConns = int32(conc + 16)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres at %s: %w (start it with scripts/bench-deps start)", redact(dbURL), err)
	}

	var serverVersion, fsync, syncCommit string
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		current_setting('synchronous_commit')`).Scan(&serverVersion, &fsync, &syncCommit); err != nil {
		return err
	}
	logf("postgres %s, fsync=%s, synchronous_commit=%s", serverVersion, fsync, syncCommit)

	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	mres, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if len(mres.Versions) > 0 {
		logf("applied %d River migrations", len(mres.Versions))
	}

	// Server memory: sampled sum of PSS over the postmaster and all its children.
	var backendPID int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backendPID); err != nil {
		return err
	}
	postmaster, err := parentPID(backendPID)
	if err != nil {
		return fmt.Errorf("find the postmaster (the bench must run on the database's machine): %w", err)
	}
	sampler := newTreeSampler(postmaster)
	sampler.start(250 * time.Millisecond)
	meter := cpuMeter{server: postmaster, client: os.Getpid(), samplerTID: sampler.tid}

	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	late := &lateness{vals: make([]float64, n)}
	noop := &NoopWorker{late: late}
	ws := river.NewWorkers()
	river.AddWorker(ws, noop)
	river.AddWorker(ws, &FlakyWorker{})

	inserter, err := river.NewClient(driver, &river.Config{Logger: quiet, Workers: ws})
	if err != nil {
		return err
	}

	truncate := func() error {
		_, err := pool.Exec(ctx, `TRUNCATE river_job`)
		return err
	}
	if err := truncate(); err != nil {
		return err
	}

	// (a) single inserts at fixed concurrency.
	logf("(a) %d single inserts at concurrency %d", n, conc)
	lat := make([]float64, n)
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	cpu0 := meter.read()
	t0 := time.Now()
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if int(i) >= n {
					return
				}
				s := time.Now()
				_, err := inserter.Insert(ctx, NoopArgs{Seq: int(i)}, &river.InsertOpts{Queue: enqueueQueue})
				lat[i] = float64(time.Since(s).Microseconds()) / 1000
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	singleSecs := time.Since(t0).Seconds()
	singleCost := meter.perItem(cpu0, n)
	if firstErr != nil {
		return fmt.Errorf("(a) insert: %w", firstErr)
	}
	sort.Float64s(lat)
	single := map[string]any{
		"ops_per_sec": round(float64(n) / singleSecs),
		"p50_ms":      round(pct(lat, 50)),
		"p99_ms":      round(pct(lat, 99)),
		"concurrency": conc,
		"seconds":     round(singleSecs),
	}
	logf("(a) %.0f ops/s, p50 %.2f ms, p99 %.2f ms", float64(n)/singleSecs, pct(lat, 50), pct(lat, 99))
	if err := truncate(); err != nil {
		return err
	}

	// (b) batch inserts.
	logf("(b) %d jobs by InsertMany in batches of %d", n, batch)
	cpu0 = meter.read()
	t0 = time.Now()
	if err := insertBatches(ctx, inserter, n, batch, func(i int) river.InsertManyParams {
		return river.InsertManyParams{Args: NoopArgs{Seq: i}, InsertOpts: &river.InsertOpts{Queue: enqueueQueue}}
	}); err != nil {
		return fmt.Errorf("(b) %w", err)
	}
	batchSecs := time.Since(t0).Seconds()
	batchCost := meter.perItem(cpu0, n)
	batchRate := float64(n) / batchSecs
	logf("(b) %.0f jobs/s", batchRate)
	batchRes := map[string]any{"ops_per_sec": round(batchRate), "batch": batch, "concurrency": 1, "seconds": round(batchSecs)}
	if err := truncate(); err != nil {
		return err
	}

	// (c) delayed jobs drained by a no-op worker. The working client starts first so that it
	// has been elected leader (River's scheduler runs on the leader) before the due time.
	worker, err := river.NewClient(driver, &river.Config{
		Logger:            quiet,
		Workers:           ws,
		Queues:            map[string]river.QueueConfig{drainQueue: {MaxWorkers: workers}},
		RetryPolicy:       shortRetry{},
		FetchPollInterval: poll,
		FetchCooldown:     cfg.cooldown,
	})
	if err != nil {
		return err
	}
	events, cancelSub := worker.SubscribeConfig(&river.SubscribeConfig{
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed},
		ChanSize: n + retryN*2 + 1000, // sends are non-blocking: big enough never to drop one
	})
	defer cancelSub()
	if err := worker.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = worker.Stop(sctx)
	}()

	insertEstimate := time.Duration(float64(n) / batchRate * 2 * float64(time.Second))
	due := time.Now().Add(insertEstimate + lead).Truncate(time.Millisecond)
	logf("(c) %d jobs scheduled at one due time (%.1f s ahead), drained with MaxWorkers %d",
		n, time.Until(due).Seconds(), workers)
	if err := insertBatches(ctx, inserter, n, batch, func(i int) river.InsertManyParams {
		return river.InsertManyParams{Args: NoopArgs{Seq: i}, InsertOpts: &river.InsertOpts{ScheduledAt: due}}
	}); err != nil {
		return fmt.Errorf("(c) %w", err)
	}
	insertedBeforeDue := time.Now().Before(due)
	if !insertedBeforeDue {
		logf("(c) warning: the inserts finished %.1f s after the due time", time.Since(due).Seconds())
	}

	// The drain's clock, and its CPU reading, start at the due time.
	time.Sleep(time.Until(due))
	cpu0 = meter.read()
	completed := 0
	var last time.Time
	timeout := time.After(time.Until(due) + 60*time.Second + time.Duration(n/200)*time.Second)
drain:
	for completed < n {
		select {
		case ev := <-events:
			if ev.Kind == river.EventKindJobCompleted && ev.Job.Kind == (NoopArgs{}).Kind() {
				completed++
				last = time.Now()
			}
		case <-timeout:
			break drain
		}
	}
	drainCost := meter.perItem(cpu0, completed)
	var dbCompleted int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed' AND kind = $1`,
		(NoopArgs{}).Kind()).Scan(&dbCompleted); err != nil {
		return err
	}
	if completed < n {
		return fmt.Errorf("(c) only %d of %d jobs completed in time (%d completed in the database)", completed, n, dbCompleted)
	}
	drainSecs := last.Sub(due).Seconds()
	drainRes := map[string]any{
		"acked_per_sec":          round(float64(n) / drainSecs),
		"n":                      n,
		"seconds":                round(drainSecs),
		"workers":                workers,
		"inserted_before_due":    insertedBeforeDue,
		"completed_in_database":  dbCompleted,
		"clock":                  "due time to the last completion event (River emits it after the completion is committed)",
		"fetch_poll_interval_ms": poll.Milliseconds(),
	}
	lv := late.vals[:min(int(late.next.Load()), n)]
	sort.Float64s(lv)
	lateRes := map[string]any{"p50": round(pct(lv, 50)), "p99": round(pct(lv, 99)), "max": round(pct(lv, 100)), "samples": len(lv)}
	logf("(c) drained %d in %.2f s after due: %.0f jobs/s; lateness p50 %.1f ms, p99 %.1f ms, max %.1f ms",
		n, drainSecs, float64(n)/drainSecs, pct(lv, 50), pct(lv, 99), pct(lv, 100))

	// (s) steady: the same working client, on an empty table.
	if err := truncate(); err != nil {
		return err
	}
	var pending int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue = $1`, drainQueue).Scan(&pending); err != nil {
		return err
	}
	if pending != 0 {
		return fmt.Errorf("(s) the queue %s still holds %d jobs", drainQueue, pending)
	}
	steadyRes, err := steadyPhase(ctx, inserter, noop, events, meter, cfg.steadyRate, cfg.steadySecs)
	if err != nil {
		return err
	}

	// (d) retry with backoff.
	logf("(d) %d jobs that fail their first attempt (retry after 100 ms)", retryN)
	t0 = time.Now()
	params := make([]river.InsertManyParams, retryN)
	for i := range params {
		params[i] = river.InsertManyParams{Args: FlakyArgs{Seq: i}, InsertOpts: &river.InsertOpts{MaxAttempts: 2}}
	}
	if _, err := inserter.InsertMany(ctx, params); err != nil {
		return fmt.Errorf("(d) insert: %w", err)
	}
	failed, done, secondAttempt := 0, 0, 0
	timeout = time.After(120 * time.Second)
retry:
	for done < retryN {
		select {
		case ev := <-events:
			if ev.Job.Kind != (FlakyArgs{}).Kind() {
				continue
			}
			switch ev.Kind {
			case river.EventKindJobFailed:
				failed++
			case river.EventKindJobCompleted:
				done++
				if ev.Job.Attempt == 2 && len(ev.Job.Errors) == 1 {
					secondAttempt++
				}
			}
		case <-timeout:
			break retry
		}
	}
	retrySecs := time.Since(t0).Seconds()
	retryOK := done == retryN && secondAttempt == retryN && failed == retryN
	logf("(d) %d/%d completed on attempt 2 after %d failures in %.2f s: retry_ok=%v", secondAttempt, retryN, failed, retrySecs, retryOK)

	peak, hwmSum := sampler.stop()
	res := result{
		System:  cfg.system,
		Version: "river " + modVersion("github.com/riverqueue/river") + ", riverpgxv5, pgx " + modVersion("github.com/jackc/pgx/v5") + ", PostgreSQL " + serverVersion,
		Guarantees: fmt.Sprintf("Postgres fsync=%s, synchronous_commit=%s: an acknowledged insert is committed to disk and survives a crash; "+
			"at-least-once execution (a job whose worker dies is rescued and run again)", fsync, syncCommit),
		N:             n,
		EnqueueSingle: single,
		EnqueueBatch:  batchRes,
		Drain:         drainRes,
		LatenessMs:    lateRes,
		RetryOK:       retryOK,
		Retry: map[string]any{"n": retryN, "completed_on_attempt_2": secondAttempt, "failed_attempts": failed,
			"seconds": round(retrySecs), "backoff": "100 ms * 2^(attempt-1) (custom RetryPolicy)"},
		Steady: steadyRes,
		CostPerItem: map[string]any{"enqueue_single": singleCost, "enqueue_batch": batchCost,
			"delivery_cycle": drainCost, "steady": steadyRes["cost_per_item"]},
		CostMethod: "CPU (utime+stime, and cutime+cstime for exited children) from /proc/PID/stat over each phase, " +
			"x 1e6 / items: server = the postmaster (parent of this run's backend) and all its descendants, " +
			"client = this process (producer and worker) less the memory sampler's own thread; delivery_cycle from the due time to the last completion, per job drained",
		PeakRSSMB: round(peak / 1024),
		PeakRSSMethod: "peak over the run of the summed PSS (smaps_rollup) of the postmaster and all its children " +
			"(backends, checkpointer, WAL writer, ...), sampled every 250 ms; PSS splits shared_buffers fairly between processes",
		PeakHWMSumMB: round(hwmSum / 1024),
		Server:       "PostgreSQL " + serverVersion,
		Config: map[string]any{
			"max_workers": workers, "batch": batch, "fetch_poll_interval_ms": poll.Milliseconds(),
			"fetch_cooldown_ms": cfg.cooldown.Milliseconds(), "profile": cfg.profile,
			"scheduler_interval_ms": 5000, "pool_max_conns": pcfg.MaxConns, "retry_n": retryN,
			"steady_rate": cfg.steadyRate, "steady_seconds": cfg.steadySecs,
		},
		StartedAt: wallStart.UTC().Format(time.RFC3339),
	}
	res.WallSeconds = round(time.Since(wallStart).Seconds())
	doc, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	fmt.Println(string(doc))
	if out != "" {
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(out, append(doc, '\n'), 0o644); err != nil {
			return err
		}
		logf("wrote %s (wall %.1f s)", out, res.WallSeconds)
	}
	if !retryOK {
		return errors.New("(d) the retry run did not complete every job on its second attempt")
	}
	return nil
}

// steadyPhase runs the steady phase: one single insert every 1/rate s for secs seconds, each
// from its own goroutine so that a slow insert never delays the schedule, each due at the
// moment its insert is issued plus a delay drawn uniformly from [1 s, 5 s] (seed 1). The
// no-op worker of (c) works them; the phase ends when every inserted job has been started and
// its completion reported, or 120 s after the pacer stops.
func steadyPhase(ctx context.Context, c *river.Client[pgxTx], noop *NoopWorker, events <-chan *river.Event,
	meter cpuMeter, rate, secs float64) (map[string]any, error) {
	total := int(math.Round(rate * secs))
	rec := newSteadyLateness(total)
	noop.steady.Store(rec)

	// Completion events of the steady jobs, read here so that the channel has room for (d)'s.
	var completed atomic.Int64
	stopEvents, eventsDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(eventsDone)
		for {
			select {
			case ev := <-events:
				if ev.Kind == river.EventKindJobCompleted && ev.Job.Kind == (NoopArgs{}).Kind() {
					completed.Add(1)
				}
			case <-stopEvents:
				return
			}
		}
	}()

	logf("(s) %d single inserts paced at %.0f/s for %.0f s, each due 1-5 s later, worked with the client of (c)",
		total, rate, secs)
	rng := rand.New(rand.NewSource(1))
	var inserted, failed atomic.Int64
	var firstErr atomic.Pointer[error] // read while inserts may still run (after a time-out)
	var wg sync.WaitGroup
	var maxLag time.Duration
	cpu0 := meter.read()
	start := time.Now()
	for i := 0; i < total; i++ {
		target := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if d := time.Until(target); d > 0 {
			time.Sleep(d)
		}
		issued := time.Now()
		maxLag = max(maxLag, issued.Sub(target))
		due := issued.Add(time.Second + time.Duration(rng.Float64()*float64(4*time.Second)))
		wg.Add(1)
		go func(seq int, due time.Time) {
			defer wg.Done()
			if _, err := c.Insert(ctx, NoopArgs{Seq: seq}, &river.InsertOpts{Queue: drainQueue, ScheduledAt: due}); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, &err)
				return
			}
			inserted.Add(1)
		}(i, due)
	}
	paceSecs := time.Since(start).Seconds()
	insertsDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(insertsDone)
	}()

	giveUp := time.After(120 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	allInserted, timedOut := false, false
wait:
	for {
		select {
		case <-insertsDone:
			allInserted = true
			insertsDone = nil
		case <-tick.C:
		case <-giveUp:
			timedOut = true
			break wait
		}
		ins := inserted.Load()
		if allInserted && rec.worked.Load() >= ins && completed.Load() >= ins {
			break wait
		}
	}
	endSecs := time.Since(start).Seconds()
	n := int(inserted.Load())
	cost := meter.perItem(cpu0, n)
	close(stopEvents)
	<-eventsDone
	if e := firstErr.Load(); e != nil {
		if n == 0 {
			return nil, fmt.Errorf("(s) every insert failed, the first with: %w", *e)
		}
		logf("(s) warning: %d inserts failed, the first with: %v", failed.Load(), *e)
	}

	lv := make([]float64, 0, total)
	for i := range rec.vals {
		if rec.seen[i].Load() {
			lv = append(lv, rec.vals[i])
		}
	}
	sort.Float64s(lv)
	early := 0
	for _, v := range lv {
		if v < 0 {
			early++
		}
	}
	stat := func(p float64) any {
		if len(lv) == 0 {
			return nil
		}
		return round(pct(lv, p))
	}
	delivered := int(rec.worked.Load())
	if len(lv) > 0 {
		logf("(s) %d inserted, %d worked (%d early) in %.1f s: lateness p50 %.1f ms, p99 %.1f ms, max %.1f ms, min %.1f ms",
			n, delivered, early, endSecs, pct(lv, 50), pct(lv, 99), pct(lv, 100), lv[0])
	}
	if timedOut {
		logf("(s) warning: gave up 120 s after the pacer stopped with %d of %d worked", delivered, n)
	}
	return map[string]any{
		"rate_offered":      rate,
		"seconds":           secs,
		"n":                 n,
		"delivered":         delivered,
		"delay_s":           []int{1, 5},
		"lateness_ms":       map[string]any{"p50": stat(50), "p99": stat(99), "max": stat(100), "min": stat(0)},
		"early":             early,
		"cost_per_item":     cost,
		"completed":         int(completed.Load()),
		"insert_errors":     int(failed.Load()),
		"pacer_seconds":     round(paceSecs),
		"pacer_max_lag_ms":  round(float64(maxLag.Microseconds()) / 1000),
		"seconds_to_end":    round(endSecs),
		"timed_out":         timedOut,
		"queue":             drainQueue,
		"insert":            "Client.Insert, one job per call, InsertOpts{Queue, ScheduledAt: issue time + delay}",
		"lateness_recorder": "worker start - job.ScheduledAt, recorded apart from the drain's, once per job",
	}, nil
}

func insertBatches(ctx context.Context, c *river.Client[pgxTx], n, batch int, mk func(int) river.InsertManyParams) error {
	params := make([]river.InsertManyParams, 0, batch)
	for i := 0; i < n; i += batch {
		params = params[:0]
		for j := i; j < min(i+batch, n); j++ {
			params = append(params, mk(j))
		}
		if _, err := c.InsertMany(ctx, params); err != nil {
			return fmt.Errorf("InsertMany: %w", err)
		}
	}
	return nil
}

// pct is the nearest-rank percentile of sorted values; 100 is the maximum.
func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(k, len(sorted)-1))]
}

func round(v float64) float64 { return math.Round(v*100) / 100 }

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

func redact(u string) string {
	if i := strings.Index(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "…" + u[i:]
		}
	}
	return u
}

// --- server memory -----------------------------------------------------------------------------

func parentPID(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0, fmt.Errorf("odd /proc/%d/stat", pid)
	}
	return strconv.Atoi(f[1])
}

type treeSampler struct {
	root    int
	tid     int // the OS thread the sampler runs on, which the CPU meter leaves out of the client
	done    chan struct{}
	stopped chan struct{}
	peakKB  float64
	hwm     map[int]float64 // last VmHWM seen per process, kB
}

func newTreeSampler(root int) *treeSampler {
	return &treeSampler{root: root, done: make(chan struct{}), stopped: make(chan struct{}), hwm: map[int]float64{}}
}

func (s *treeSampler) start(every time.Duration) {
	ready := make(chan struct{})
	go func() {
		// On a thread of its own: reading smaps_rollup of every backend costs a few ms of CPU
		// per sample, which the CPU meter subtracts from the client's by this thread's id.
		runtime.LockOSThread()
		s.tid = syscall.Gettid()
		close(ready)
		defer close(s.stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.done:
				return
			case <-t.C:
			}
		}
	}()
	<-ready
}

func (s *treeSampler) sample() {
	pids := []int{s.root}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == s.root {
			continue
		}
		if pp, err := parentPID(pid); err == nil && pp == s.root {
			pids = append(pids, pid)
		}
	}
	var pss float64
	for _, pid := range pids {
		pss += kbField(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:")
		if h := kbField(fmt.Sprintf("/proc/%d/status", pid), "VmHWM:"); h > 0 {
			s.hwm[pid] = h
		}
	}
	if pss > s.peakKB {
		s.peakKB = pss
	}
}

// stop returns the peak summed PSS and the sum of the VmHWM of every process seen (kB).
func (s *treeSampler) stop() (peakKB, hwmSumKB float64) {
	close(s.done)
	<-s.stopped
	s.sample()
	for _, h := range s.hwm {
		hwmSumKB += h
	}
	return s.peakKB, hwmSumKB
}

func kbField(path, key string) float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, key) {
			f := strings.Fields(line[len(key):])
			if len(f) > 0 {
				v, _ := strconv.ParseFloat(f[0], 64)
				return v
			}
		}
	}
	return 0
}

// --- CPU per item ------------------------------------------------------------------------------

// cpuMeter reads the CPU time used so far by two process trees: the Postgres server (the
// postmaster and all its descendants) and this benchmark process (and its children, if any),
// less the thread of the memory sampler (samplerTID, 0 for none).
type cpuMeter struct{ server, client, samplerTID int }

type cpuReading struct{ server, client float64 } // CPU seconds

type procStat struct {
	ppid       int
	own, child float64 // utime+stime, cutime+cstime (exited, waited-for children), in ticks
}

// procStats reads /proc/*/stat.
func procStats() map[int]procStat {
	stats := map[int]procStat{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // exited since the listing
		}
		s := string(b)
		// Fields after the command name (field 2, in parentheses, may hold spaces): f[1] is
		// field 4 (ppid), f[11]..f[14] are fields 14-17 (utime, stime, cutime, cstime).
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		var t [4]float64
		for i := range t {
			t[i], _ = strconv.ParseFloat(f[11+i], 64)
		}
		stats[pid] = procStat{ppid: ppid, own: t[0] + t[1], child: t[2] + t[3]}
	}
	return stats
}

// treeCPU is the CPU seconds of root and all its descendants: each one's utime+stime, plus
// each one's cutime+cstime, which hold the children that exited during the run (the
// postmaster's holds the backends that ended). /proc counts in USER_HZ = 100 ticks/s.
func treeCPU(stats map[int]procStat, root int) float64 {
	children := map[int][]int{}
	for pid, st := range stats {
		children[st.ppid] = append(children[st.ppid], pid)
	}
	var ticks float64
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if st, ok := stats[pid]; ok {
			ticks += st.own + st.child
		}
		queue = append(queue, children[pid]...)
	}
	return ticks / 100
}

func (m cpuMeter) read() cpuReading {
	stats := procStats()
	r := cpuReading{server: treeCPU(stats, m.server), client: treeCPU(stats, m.client)}
	if m.samplerTID > 0 {
		r.client -= threadCPU(m.client, m.samplerTID)
	}
	return r
}

// threadCPU is the CPU seconds (utime+stime) of thread tid of process pid so far.
func threadCPU(pid, tid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

// perItem is the CPU per item (µs) of what happened since before.
func (m cpuMeter) perItem(before cpuReading, items int) map[string]any {
	after := m.read()
	n := float64(max(items, 1))
	server := (after.server - before.server) * 1e6 / n
	client := (after.client - before.client) * 1e6 / n
	return map[string]any{"server_cpu_us": round(server), "client_cpu_us": round(client), "total_cpu_us": round(server + client)}
}
