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
//
// "otel-sdk" is the SDK as an application would run it, nothing turned
// down: sdktrace.NewTracerProvider's default sampler (ParentBased(AlwaysOn):
// every span, the consumer's included, is sampled and recorded), its
// BatchSpanProcessor with the default queue (2048 spans; it drops spans when
// full, so the run counts what reached the exporter and says so), an
// exporter that counts the spans and discards them, and metrics on an
// sdkmetric.MeterProvider with a ManualReader (every instrument aggregates;
// nothing collects). The burn-down's window ends after a ForceFlush, so the
// batcher's export of the last spans is in it. Two opt-in variants split it
// (-variant otel-traces or otel-metrics): the SDK tracer with no-op
// metrics, and SDK metrics with a no-op tracer.
//
// To count instructions rather than time (repeatable on a shared machine),
// run one variant under callgrind with the window's markers:
//
//	GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind \
//	  --zero-before=main.windowStart --dump-before=main.windowEnd \
//	  ./otelbench -engines lite -rounds 1 -jobs 3000 -variant otel-sdk
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

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
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
	only     = flag.String("variant", "", "run these variants alone (comma-separated: plain, headers, otel-off, otel-sdk, otel-traces, otel-metrics), e.g. to profile one")
	cpuprof  = flag.String("cpuprofile", "", "write a CPU profile of the burn-downs to this file")
	memprof  = flag.String("memprofile", "", "write an allocation profile to this file at the end")
	variants = []string{"plain", "headers", "otel-off", "otel-sdk"}
)

func main() {
	flag.Parse()
	if *only != "" {
		variants = strings.Split(*only, ",")
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
			serverPid = srv.Pid()
		default:
			check(fmt.Errorf("unknown engine %q", engine))
		}
		run(ctx, engine, dsn)
	}
}

type result struct{ rate, cpu, server []float64 } // jobs/s, CPU µs per job: this process's, the server's

// spansLost counts the consumer spans that did not reach the exporter (the
// batcher drops spans when its queue is full): the run says so, since a
// dropped span costs less than an exported one.
var spansLost atomic.Int64

// serverPid is the throwaway PostgreSQL's postmaster while pg runs.
var serverPid int

func run(ctx context.Context, engine string, dsn func() string) {
	res := make([]result, len(variants))
	for r := range *rounds {
		for k := range variants {
			vi := (r + k) % len(variants)
			rate, cpu, server := burnDown(ctx, dsn(), variants[vi], instrumentation(variants[vi]))
			res[vi].rate = append(res[vi].rate, rate)
			res[vi].cpu = append(res[vi].cpu, cpu)
			res[vi].server = append(res[vi].server, server)
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("\n== alkotel: burn-down of %d jobs via Work, %s (median of %d rounds; load %s)\n",
		*jobs, engine, *rounds, strings.Join(strings.Fields(string(load))[:3], " "))
	if serverPid != 0 {
		fmt.Println("CPU µs/job: this process's; +server adds the PostgreSQL cluster's (its postmaster and backends)")
	}
	fmt.Printf("%-10s %10s %11s %11s %10s %9s %11s   %s\n", "variant", "jobs/s", "CPU µs/job", "+server", "rate/plain", "CPU/plain", "+srv/plain", "rounds (jobs/s; CPU µs/job; +server)")
	for vi, v := range variants {
		rate, cpu, total := median(res[vi].rate), median(res[vi].cpu), median(sum(res[vi].cpu, res[vi].server))
		rr, cr, tr := "", "", ""
		if variants[0] == "plain" {
			rr = fmt.Sprintf("%.3f", rate/median(res[0].rate))
			cr = fmt.Sprintf("%.3f", cpu/median(res[0].cpu))
			if serverPid != 0 {
				tr = fmt.Sprintf("%.3f", total/median(sum(res[0].cpu, res[0].server)))
			}
		}
		srv, srvRounds := "", ""
		if serverPid != 0 {
			srv, srvRounds = fmt.Sprintf("%.1f", total), "; "+join(sum(res[vi].cpu, res[vi].server), "%.1f")
		}
		fmt.Printf("%-10s %10.0f %11.1f %11s %10s %9s %11s   %s; %s%s\n", v, rate, cpu, srv, rr, cr, tr,
			join(res[vi].rate, "%.0f"), join(res[vi].cpu, "%.1f"), srvRounds)
	}
	if n := spansLost.Swap(0); n != 0 {
		fmt.Printf("WARNING: %d consumer spans did not reach the exporter (the batcher's queue was full)\n", n)
	} else if slices.ContainsFunc(variants, func(v string) bool { return v == "otel-sdk" || v == "otel-traces" }) {
		fmt.Println("every consumer span reached the exporter (SDK: ParentBased(AlwaysOn) sampler, BatchSpanProcessor, an exporter that counts and discards)")
	}
	on, off := slices.Index(variants, "otel-sdk"), slices.Index(variants, "otel-off")
	if on >= 0 && off >= 0 {
		fmt.Printf("tracing on (SDK, no-op exporter) / off: CPU per job %.3f", median(res[on].cpu)/median(res[off].cpu))
		if serverPid != 0 {
			fmt.Printf(" (+server %.3f)", median(sum(res[on].cpu, res[on].server))/median(sum(res[off].cpu, res[off].server)))
		}
		fmt.Printf(", throughput %.3f\n", median(res[on].rate)/median(res[off].rate))
	}
}

// telemetry is a variant's alkotel (nil for plain and headers) and, when
// it traces on the SDK, its provider and exporter.
type telemetry struct {
	inst     *alkotel.Instrumentation
	provider *sdktrace.TracerProvider
	exporter *discardExporter
}

// instrumentation is a variant's telemetry.
func instrumentation(variant string) telemetry {
	var t telemetry
	var tp trace.TracerProvider = tracenoop.NewTracerProvider()
	var mp metric.MeterProvider = metricnoop.NewMeterProvider()
	switch variant {
	case "plain", "headers":
		return t
	case "otel-off":
	case "otel-sdk", "otel-traces", "otel-metrics":
		if variant != "otel-metrics" {
			t.exporter = &discardExporter{}
			t.provider = sdktrace.NewTracerProvider(sdktrace.WithBatcher(t.exporter))
			tp = t.provider
		}
		if variant != "otel-traces" {
			mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		}
	default:
		check(fmt.Errorf("unknown variant %q", variant))
	}
	t.inst = alkotel.New(alkotel.WithTracerProvider(tp), alkotel.WithMeterProvider(mp))
	return t
}

// discardExporter counts the spans the batcher hands it, and drops them.
type discardExporter struct{ spans atomic.Int64 }

func (e *discardExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.spans.Add(int64(len(spans)))
	return nil
}

func (e *discardExporter) Shutdown(context.Context) error { return nil }

// windowStart and windowEnd mark the burn-down's window for callgrind
// (--zero-before=main.windowStart --dump-before=main.windowEnd).
//
//go:noinline
func windowStart() { windowMark.Add(1) }

//go:noinline
func windowEnd() { windowMark.Add(1) }

var windowMark atomic.Int64

// burnDown enqueues the jobs on a fresh database (untimed), then works
// them off; it returns jobs/s and this process's CPU µs per job.
func burnDown(ctx context.Context, dsn, variant string, t telemetry) (rate, cpu, server float64) {
	inst := t.inst
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
	var exported int64
	if t.provider != nil { // the enqueue's producer spans are out of the way
		check(t.provider.ForceFlush(ctx))
		exported = t.exporter.spans.Load()
	}
	runtime.GC()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	windowStart()
	cpu0, srv0, start := cpuTime(), serverCPU(), time.Now()
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
	if t.provider != nil { // the batcher's export of the last spans is the burn-down's too
		check(t.provider.ForceFlush(ctx))
	}
	elapsed, used, srv := time.Since(start), cpuTime()-cpu0, serverCPU()-srv0
	windowEnd()
	cancel()
	check(<-done)
	if t.provider != nil {
		check(t.provider.Shutdown(ctx))
		if n := t.exporter.spans.Load() - exported; n != int64(*jobs) {
			spansLost.Add(int64(*jobs) - n)
		}
	}
	n := float64(*jobs)
	return n / elapsed.Seconds(), float64(used.Microseconds()) / n, float64(srv.Microseconds()) / n
}

// serverCPU is the throwaway cluster's CPU time (0 while SQLite runs).
func serverCPU() time.Duration { return pgtest.ClusterCPU(serverPid) }

func sum(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] + b[i]
	}
	return out
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
