package alkotel_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/alkstore/alkstore/otel/alkotel"
	"github.com/alkstore/alkstore/store"
)

// instrumentations are the variants the benchmarks compare: none (the
// store and handler as they are; twice, the second a control of the
// harness's own spread), alkotel on OpenTelemetry's no-op providers
// (instrumented, telemetry off), and alkotel on the SDK, every span sampled
// and handed to an exporter that drops it.
func instrumentations() []struct {
	name string
	inst *alkotel.Instrumentation
} {
	sdk := alkotel.New(
		alkotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))),
		alkotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))))
	off := alkotel.New(alkotel.WithTracerProvider(tracenoop.NewTracerProvider()),
		alkotel.WithMeterProvider(metricnoop.NewMeterProvider()))
	return []struct {
		name string
		inst *alkotel.Instrumentation
	}{{"plain", nil}, {"plain-again", nil}, {"otel-off", off}, {"otel-sdk-noop-exporter", sdk}}
}

func benchStore(b *testing.B, inst *alkotel.Instrumentation) *store.Store {
	var opts []store.Option
	if inst != nil {
		opts = append(opts, store.WithInsertMiddleware(inst.InsertMiddleware()))
	}
	s, err := store.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkEnqueue: one job per op, one producer, on SQLite.
func BenchmarkEnqueue(b *testing.B) {
	for _, v := range instrumentations() {
		b.Run(v.name, func(b *testing.B) {
			q := benchStore(b, v.inst).Queue("bench")
			ctx := context.Background()
			payload := []byte(`{"to":"someone@example.com"}`)
			for b.Loop() {
				if _, err := q.Enqueue(ctx, payload, store.EnqueueOpts{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBurnDown: b.N jobs enqueued untimed (through the variant's
// insert middleware), then Work with a no-op handler (wrapped by the
// variant) until every one is acked; one op is one job.
func BenchmarkBurnDown(b *testing.B) {
	for _, v := range instrumentations() {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			q := benchStore(b, v.inst).Queue("burn")
			jobs := make([]store.NewJob, 1000)
			for i := range jobs {
				jobs[i].Payload = []byte(`{"to":"someone@example.com"}`)
			}
			for i := 0; i < b.N; i += len(jobs) {
				if _, err := q.EnqueueMany(ctx, jobs[:min(len(jobs), b.N-i)]); err != nil {
					b.Fatal(err)
				}
			}
			var handled atomic.Int64
			h := store.Handler(func(context.Context, *store.Job) error { handled.Add(1); return nil })
			if v.inst != nil {
				h = v.inst.Handler(h)
			}
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			b.ResetTimer()
			go func() { done <- q.Work(wctx, store.WorkOpts{Concurrency: 100}, h) }()
			for handled.Load() < int64(b.N) {
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkBurnDownInterleaved burns down b.N jobs per variant in rounds
// that take turns (plain, off, sdk, plain, ...), so a shared machine's
// drifting load falls on every variant alike, and reports each variant's
// median rate over the rounds and its ratio to plain's.
func BenchmarkBurnDownInterleaved(b *testing.B) {
	const rounds = 8
	vars := instrumentations()
	rates := make([][]float64, len(vars))
	ctx := context.Background()
	for r := range rounds {
		for k := range vars {
			vi := (r + k) % len(vars) // each variant takes each place in turn
			v := vars[vi]
			s := benchStore(b, v.inst)
			q := s.Queue("burn")
			jobs := make([]store.NewJob, 1000)
			for i := range jobs {
				jobs[i].Payload = []byte(`{"to":"someone@example.com"}`)
			}
			for i := 0; i < b.N; i += len(jobs) {
				if _, err := q.EnqueueMany(ctx, jobs[:min(len(jobs), b.N-i)]); err != nil {
					b.Fatal(err)
				}
			}
			var handled atomic.Int64
			h := store.Handler(func(context.Context, *store.Job) error { handled.Add(1); return nil })
			if v.inst != nil {
				h = v.inst.Handler(h)
			}
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- q.Work(wctx, store.WorkOpts{Concurrency: 100}, h) }()
			for handled.Load() < int64(b.N) {
				time.Sleep(time.Millisecond)
			}
			rates[vi] = append(rates[vi], float64(b.N)/time.Since(start).Seconds())
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			_ = s.Close() // an open store's background work would slow the next variant
		}
	}
	median := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	base := median(rates[0])
	b.ReportMetric(base, "plain-jobs/s")
	for vi, v := range vars[1:] {
		b.ReportMetric(median(rates[vi+1])/base, v.name+"/plain")
	}
}
