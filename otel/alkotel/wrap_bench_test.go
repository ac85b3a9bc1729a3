package alkotel_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/alkstore/alkstore/otel/alkotel"
	"github.com/alkstore/alkstore/store"
)

// BenchmarkHandlerWrap is the handler wrapper alone, without a database:
// its CPU and allocations per job; the SDK's traces and metrics also each
// alone (the other on its no-op provider).
func BenchmarkHandlerWrap(b *testing.B) {
	now := time.Now()
	vars := append(instrumentations(), []struct {
		name string
		inst *alkotel.Instrumentation
	}{
		{"otel-sdk-traces-only", alkotel.New(
			alkotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))),
			alkotel.WithMeterProvider(metricnoop.NewMeterProvider()))},
		{"otel-sdk-metrics-only", alkotel.New(alkotel.WithTracerProvider(tracenoop.NewTracerProvider()),
			alkotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))))},
	}...)
	for _, v := range vars {
		b.Run(v.name, func(b *testing.B) {
			h := store.Handler(func(context.Context, *store.Job) error { return nil })
			if v.inst != nil {
				h = v.inst.Handler(h)
			}
			j := &store.Job{ID: 1, Queue: "q", Attempts: 1, MaxAttempts: 25, CreatedAt: now, RunAt: now, ClaimedAt: &now,
				Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
			ctx := context.Background()
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				_ = h(ctx, j)
			}
		})
	}
}

// BenchmarkSDKSpan is the floor under BenchmarkHandlerWrap's SDK variant:
// what the OpenTelemetry SDK alone costs for one consumer span with the
// same parent (extracted from the same traceparent header), the same seven
// attributes and the same batcher and exporter, without alkotel. The
// wrapper's cost above it is alkotel's own.
func BenchmarkSDKSpan(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracer := tp.Tracer(alkotel.ScopeName)
	props := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	headers := propagation.MapCarrier{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	kind := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	queue := []attribute.KeyValue{alkotel.KeySystem.String(alkotel.System), alkotel.KeyDestination.String("q"),
		alkotel.KeyOperationName.String("process"), alkotel.KeyOperationType.String("process")}
	attrs := make([]attribute.KeyValue, 7) // reused: the SDK copies them
	ctx := context.Background()
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		parent := props.Extract(ctx, headers)
		_, span := tracer.Start(parent, "process q", kind...)
		copy(attrs, queue)
		attrs[4], attrs[5], attrs[6] = alkotel.KeyMessageID.String("1"), alkotel.KeyAttempt.Int(1), alkotel.KeyOutcome.String("completed")
		span.SetAttributes(attrs...)
		span.End()
	}
}

// reportCPU reports the process's CPU time (user and system) per op,
// which a shared machine's load inflates far less than ns/op (wall time):
// call it before the loop and the function it returns after.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() { b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op") }
}
