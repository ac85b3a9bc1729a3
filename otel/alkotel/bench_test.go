package alkotel_test

import (
	"context"
	"path/filepath"
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
// store and handler as they are), alkotel on OpenTelemetry's no-op
// providers (instrumented, telemetry off), and alkotel on the SDK, every
// span sampled and handed to an exporter that drops it.
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
	}{{"plain", nil}, {"otel-off", off}, {"otel-sdk-noop-exporter", sdk}}
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
