// Command otelbench measures what alkotel costs a burn-down, in one run:
// the same burn-down of jobs (enqueued untimed through the variant's insert
// middleware, so they carry a traceparent when tracing is on) plain,
// instrumented with telemetry off (OpenTelemetry's no-op providers), and
// instrumented on the SDK with every span sampled and handed to a batcher
// whose exporter drops it (metrics to a manual reader); and, to tell the
// store's share from alkotel's, plain jobs that carry a traceparent header
// as traced jobs do ("headers"). Rounds take turns
// (plain, off, sdk, then off, sdk, plain, ...) so a shared machine's
// drifting load falls on every variant alike. For each variant it prints
// the median over the rounds of the throughput and of this process's CPU
// per job (user + system, over the burn-down only), and their ratios to
// plain's. `make bench` runs it after the core's bench.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/alkstore/alkstore/internal/pgtest"
	"github.com/alkstore/alkstore/otel/alkotel"
	"github.com/alkstore/alkstore/store"
)

var (
	jobs     = flag.Int("jobs", 20000, "jobs per burn-down")
	rounds   = flag.Int("rounds", 3, "burn-downs per variant (the median is reported)")
	workers  = flag.Int("workers", 100, "Work concurrency")
	engines  = flag.String("engines", "lite,pg", "engines to measure (pg starts a throwaway PostgreSQL)")
	only     = flag.String("variant", "", "run this variant alone (plain, headers, otel-off, otel-sdk), e.g. to profile it")
	cpuprof  = flag.String("cpuprofile", "", "write a CPU profile of the burn-downs to this file")
	memprof  = flag.String("memprofile", "", "write an allocation profile to this file at the end")
	variants = []string{"plain", "headers", "otel-off", "otel-sdk"}
)

func main() {
	flag.Parse()
	if *only != "" {
		variants = []string{*only}
	}
	ctx := context.Background()
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		check(err)
		check(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	if *memprof != "" {
		runtime.MemProfileRate = 4096
		defer func() {
			f, err := os.Create(*memprof)
			check(err)
			check(pprof.Lookup("allocs").WriteTo(f, 0))
		}()
	}
	for _, engine := range strings.Split(*engines, ",") {
		dsn := func() string { return "" }
		switch engine {
		case "lite":
			dir, err := os.MkdirTemp("", "otelbench")
			check(err)
			defer os.RemoveAll(dir)
			n := 0
			dsn = func() string { n++; return filepath.Join(dir, fmt.Sprintf("b%d.db", n)) }
		case "pg":
			srv, err := pgtest.Start()
			check(err)
			defer srv.Stop()
			dsn = func() string { d, err := srv.NewDatabase(ctx); check(err); return d }
		default:
			check(fmt.Errorf("unknown engine %q", engine))
		}
		run(ctx, engine, dsn)
	}
}

type result struct{ rate, cpu []float64 } // jobs/s, CPU µs per job

func run(ctx context.Context, engine string, dsn func() string) {
	res := make([]result, len(variants))
	for r := range *rounds {
		for k := range variants {
			vi := (r + k) % len(variants)
			rate, cpu := burnDown(ctx, dsn(), variants[vi], instrumentation(variants[vi]))
			res[vi].rate = append(res[vi].rate, rate)
			res[vi].cpu = append(res[vi].cpu, cpu)
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("\n== alkotel: burn-down of %d jobs via Work, %s (median of %d rounds; load %s)\n",
		*jobs, engine, *rounds, strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Printf("%-10s %12s %14s %10s %10s   %s\n", "variant", "jobs/s", "CPU µs/job", "rate/plain", "CPU/plain", "rounds (jobs/s; CPU µs/job)")
	for vi, v := range variants {
		rate, cpu := median(res[vi].rate), median(res[vi].cpu)
		rr, cr := "", ""
		if variants[0] == "plain" {
			rr = fmt.Sprintf("%.3f", rate/median(res[0].rate))
			cr = fmt.Sprintf("%.3f", cpu/median(res[0].cpu))
		}
		fmt.Printf("%-10s %12.0f %14.1f %10s %10s   %s; %s\n", v, rate, cpu, rr, cr, join(res[vi].rate, "%.0f"), join(res[vi].cpu, "%.1f"))
	}
}

// instrumentation is a variant's alkotel, nil for plain.
func instrumentation(variant string) *alkotel.Instrumentation {
	switch variant {
	case "plain", "headers":
		return nil
	case "otel-off":
		return alkotel.New(alkotel.WithTracerProvider(tracenoop.NewTracerProvider()),
			alkotel.WithMeterProvider(metricnoop.NewMeterProvider()))
	case "otel-sdk":
		return alkotel.New(
			alkotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))),
			alkotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))))
	}
	check(fmt.Errorf("unknown variant %q", variant))
	return nil
}

// burnDown enqueues the jobs on a fresh database (untimed), then works
// them off; it returns jobs/s and this process's CPU µs per job.
func burnDown(ctx context.Context, dsn, variant string, inst *alkotel.Instrumentation) (float64, float64) {
	var opts []store.Option
	if inst != nil {
		opts = append(opts, store.WithInsertMiddleware(inst.InsertMiddleware()))
	}
	if variant == "headers" { // what the instrumentation's insert side stores: one traceparent per job
		opts = append(opts, store.WithInsertMiddleware(func(next store.InsertFunc) store.InsertFunc {
			return func(ctx context.Context, in *store.Insert) error {
				for i := range in.Messages {
					in.Messages[i].SetHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
				}
				return next(ctx, in)
			}
		}))
	}
	s, err := store.Open(ctx, dsn, opts...)
	check(err)
	defer s.Close()
	q := s.Queue("burn")
	batch := make([]store.NewJob, 1000)
	for i := range batch {
		batch[i].Payload = []byte(`{"to":"someone@example.com"}`)
	}
	for i := 0; i < *jobs; i += len(batch) {
		_, err := q.EnqueueMany(ctx, batch[:min(len(batch), *jobs-i)])
		check(err)
	}
	var handled atomic.Int64
	h := store.Handler(func(context.Context, *store.Job) error { handled.Add(1); return nil })
	if inst != nil {
		h = inst.Handler(h)
	}
	runtime.GC()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	cpu0, start := cpuTime(), time.Now()
	go func() { done <- q.Work(wctx, store.WorkOpts{Concurrency: *workers}, h) }()
	for {
		if handled.Load() >= int64(*jobs) {
			st, err := q.Stats(ctx)
			check(err)
			if st.Ready+st.Running == 0 { // every ack committed
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	cancel()
	check(<-done)
	return float64(*jobs) / elapsed.Seconds(), float64(cpu.Microseconds()) / float64(*jobs)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func join(xs []float64, format string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, " ")
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "otelbench:", err)
		os.Exit(1)
	}
}
