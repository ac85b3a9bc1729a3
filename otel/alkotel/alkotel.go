// Package alkotel instruments alkstore with OpenTelemetry: producer spans on
// every publish and enqueue that carry W3C trace context in the message's
// headers, consumer spans on job handlers and stream consumers that
// continue that trace, and metrics of the store's queues and streams.
//
// It lives in its own module so alkstore's core keeps its small dependency
// set. Attributes follow OpenTelemetry's messaging semantic conventions
// (messaging.system "alkstore", messaging.destination.name the queue or
// stream, messaging.operation.name and .type, messaging.message.id, and
// messaging.batch.message_count on batches).
//
//	inst := alkotel.New()                                          // global providers unless given
//	s, _ := store.Open(ctx, dsn, store.WithInsertMiddleware(inst.InsertMiddleware()))
//	c := client.New(s, client.Opts{Middleware: []client.Middleware{inst.Middleware()}})
//	reg, _ := inst.ObserveStore(s)                                 // queue and stream gauges
//	defer reg.Unregister()
package alkotel

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/alkstore/alkstore/client"
	"github.com/alkstore/alkstore/store"
)

// ScopeName is the instrumentation scope of alkotel's tracer and meter.
const ScopeName = "github.com/alkstore/alkstore/otel/alkotel"

// Attribute keys (OpenTelemetry messaging semantic conventions, and
// alkstore's own under "alkstore.").
const (
	KeySystem          = attribute.Key("messaging.system")
	KeyDestination     = attribute.Key("messaging.destination.name")
	KeyOperationName   = attribute.Key("messaging.operation.name")
	KeyOperationType   = attribute.Key("messaging.operation.type")
	KeyMessageID       = attribute.Key("messaging.message.id")
	KeyBatchCount      = attribute.Key("messaging.batch.message_count")
	KeyConsumerGroup   = attribute.Key("messaging.consumer.group.name")
	KeyErrorType       = attribute.Key("error.type")
	KeyOutcome         = attribute.Key("alkstore.job.outcome")
	KeyAttempt         = attribute.Key("alkstore.job.attempt")
	KeyState           = attribute.Key("alkstore.job.state")
	KeyConsumer        = attribute.Key("alkstore.consumer")
	KeyTransactional   = attribute.Key("alkstore.tx")
	System             = "alkstore"
	operationPublish   = "publish"
	operationEnqueue   = "enqueue"
	operationProcess   = "process"
	operationTypeSend  = "send"
	operationTypeProc  = "process"
	errorTypeOther     = "_OTHER"
	metricSent         = "messaging.client.sent.messages"
	metricProcess      = "messaging.process.duration"
	metricStartDelay   = "alkstore.job.start_delay"
	metricQueueJobs    = "alkstore.queue.jobs"
	metricOldestReady  = "alkstore.queue.oldest_ready"
	metricConsumerLag  = "alkstore.consumer.lag"
	metricGroupLag     = "alkstore.group.lag"
	metricGroupMembers = "alkstore.group.members"
	metricHeadless     = "alkstore.stream.headless_keys"
	metricHeadlessAge  = "alkstore.stream.oldest_headless"
	metricHorizonLag   = "alkstore.horizon.lag"
	metricHorizonWait  = "alkstore.horizon.waiting"
	metricHorizonStall = "alkstore.horizon.holder_age"
)

// Option configures New.
type Option func(*config)

type config struct {
	tp    trace.TracerProvider
	mp    metric.MeterProvider
	props propagation.TextMapPropagator
}

// WithTracerProvider sets the tracer provider (default otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithMeterProvider sets the meter provider (default otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithPropagator sets the propagator that writes and reads trace context in
// headers (default: W3C trace context and baggage).
func WithPropagator(p propagation.TextMapPropagator) Option { return func(c *config) { c.props = p } }

// Instrumentation holds alkotel's tracer, meter and instruments.
type Instrumentation struct {
	tracer     trace.Tracer
	meter      metric.Meter
	props      propagation.TextMapPropagator
	sent       metric.Int64Counter
	process    metric.Float64Histogram
	startDelay metric.Float64Histogram
	// sets caches the metric attribute sets by setKey: building a set
	// sorts and allocates, and a queue's few sets serve every job.
	sets sync.Map
}

// setKey names one metric attribute set.
type setKey struct {
	metric, dest, consumer, op, outcome string
	failed                              bool
}

// set returns the cached attribute set of k.
func (i *Instrumentation) set(k setKey) metric.MeasurementOption {
	if s, ok := i.sets.Load(k); ok {
		return s.(metric.MeasurementOption)
	}
	kvs := []attribute.KeyValue{KeySystem.String(System), KeyDestination.String(k.dest)}
	if k.op != "" {
		typ := operationTypeProc
		if k.op != operationProcess {
			typ = operationTypeSend
		}
		kvs = append(kvs, KeyOperationName.String(k.op), KeyOperationType.String(typ))
	}
	if k.consumer != "" {
		kvs = append(kvs, KeyConsumerGroup.String(k.consumer))
	}
	if k.outcome != "" {
		kvs = append(kvs, KeyOutcome.String(k.outcome))
	}
	if k.failed {
		kvs = append(kvs, KeyErrorType.String(errorTypeOther))
	}
	s, _ := i.sets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kvs...)))
	return s.(metric.MeasurementOption)
}

// extract reads the trace context of a message's headers; ctx as it is
// when there are none.
func (i *Instrumentation) extract(ctx context.Context, headers map[string]string) context.Context {
	if len(headers) == 0 {
		return ctx
	}
	return i.props.Extract(ctx, headerCarrier(headers))
}

// New returns the instrumentation. Instruments that fail to be created are
// replaced by no-ops (OpenTelemetry's own convention: telemetry never
// fails the application).
func New(opts ...Option) *Instrumentation {
	c := config{tp: otel.GetTracerProvider(), mp: otel.GetMeterProvider(),
		props: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
	for _, o := range opts {
		o(&c)
	}
	i := &Instrumentation{tracer: c.tp.Tracer(ScopeName), meter: c.mp.Meter(ScopeName), props: c.props}
	i.sent, _ = i.meter.Int64Counter(metricSent, metric.WithUnit("{message}"),
		metric.WithDescription("Events published and jobs enqueued (messaging.operation.name publish or enqueue)"))
	i.process, _ = i.meter.Float64Histogram(metricProcess, metric.WithUnit("s"),
		metric.WithDescription("How long a job handler or event consumer ran, by alkstore.job.outcome"))
	i.startDelay, _ = i.meter.Float64Histogram(metricStartDelay, metric.WithUnit("s"),
		metric.WithDescription("From a job's due time (created or run_at, whichever is later) to its claim: wake latency plus queueing"))
	return i
}

// headerCarrier reads a message's headers for the propagator.
type headerCarrier map[string]string

func (h headerCarrier) Get(key string) string { return h[key] }
func (h headerCarrier) Set(key, value string) { h[key] = value }
func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// messageCarrier writes into an insert's message through SetHeader, which
// never changes the caller's map.
type messageCarrier struct{ m *store.InsertMessage }

func (c messageCarrier) Get(key string) string { return c.m.Headers[key] }
func (c messageCarrier) Set(key, value string) { c.m.SetHeader(key, value) }
func (c messageCarrier) Keys() []string        { return headerCarrier(c.m.Headers).Keys() }

// InsertMiddleware returns the store middleware that starts a producer span
// per publish or enqueue call (one for a batch, with its message count),
// writes its trace context into every message's headers, and counts the
// messages sent.
func (i *Instrumentation) InsertMiddleware() store.InsertMiddleware {
	return func(next store.InsertFunc) store.InsertFunc {
		return func(ctx context.Context, in *store.Insert) error {
			op := operationEnqueue
			if in.Kind == store.InsertPublish {
				op = operationPublish
			}
			ctx, span := i.tracer.Start(ctx, op+" "+in.Name, trace.WithSpanKind(trace.SpanKindProducer))
			defer span.End()
			recording := span.IsRecording()
			if recording {
				span.SetAttributes(KeySystem.String(System), KeyDestination.String(in.Name),
					KeyOperationName.String(op), KeyOperationType.String(operationTypeSend))
				if in.Batch {
					span.SetAttributes(KeyBatchCount.Int(len(in.Messages)))
				}
				if in.Tx {
					span.SetAttributes(KeyTransactional.Bool(true))
				}
			}
			if span.SpanContext().IsValid() {
				for k := range in.Messages {
					i.props.Inject(ctx, messageCarrier{&in.Messages[k]})
				}
			}
			err := next(ctx, in)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			} else if recording && len(in.Messages) == 1 {
				span.SetAttributes(KeyMessageID.String(strconv.FormatInt(in.Messages[0].ID, 10)))
			}
			i.sent.Add(ctx, int64(len(in.Messages)), i.set(setKey{metric: metricSent, dest: in.Name, op: op, failed: err != nil}))
			return err
		}
	}
}

// Middleware returns the client middleware that runs each job in a
// consumer span continuing the trace its enqueue started (the producer's
// span is its parent and also a link), and records the handler's duration
// by outcome (store.HandlerOutcome, named by OutcomeName). Only retried and
// dead runs mark the span as failed: a snooze, a cancel or a stop do not.
func (i *Instrumentation) Middleware() client.Middleware { return i.Handler }

// Handler wraps h like Middleware, for Queue.Work, JobQueue.Work and
// Outbox.Run without a client.
func (i *Instrumentation) Handler(h store.Handler) store.Handler {
	return func(ctx context.Context, job *store.Job) error {
		return i.runInSpan(ctx, job, func(ctx context.Context) error { return h(ctx, job) })
	}
}

// TxHandler wraps a transactional handler (Queue.WorkTx, JobQueue.WorkTx)
// like Handler: its consumer span covers the handler's run inside the
// transaction. (A client's HandleTx takes Middleware.)
func (i *Instrumentation) TxHandler(h store.TxHandler) store.TxHandler {
	return func(ctx context.Context, tx store.Tx, job *store.Job) error {
		return i.runInSpan(ctx, job, func(ctx context.Context) error { return h(ctx, tx, job) })
	}
}

// runInSpan runs one job's handler in a consumer span continuing the trace
// of its enqueue, and records its duration by outcome.
func (i *Instrumentation) runInSpan(ctx context.Context, job *store.Job, run func(ctx context.Context) error) error {
	parent := i.extract(ctx, job.Headers)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	if link := trace.LinkFromContext(parent); link.SpanContext.IsValid() {
		opts = append(opts, trace.WithLinks(link))
	}
	ctx, span := i.tracer.Start(parent, operationProcess+" "+job.Queue, opts...)
	defer span.End()
	recording := span.IsRecording()
	if recording {
		span.SetAttributes(KeySystem.String(System), KeyDestination.String(job.Queue),
			KeyOperationName.String(operationProcess), KeyOperationType.String(operationTypeProc),
			KeyMessageID.String(strconv.FormatInt(job.ID, 10)), KeyAttempt.Int(job.Attempts))
	}
	if job.ClaimedAt != nil {
		due := job.RunAt
		if job.CreatedAt.After(due) {
			due = job.CreatedAt
		}
		i.startDelay.Record(ctx, max(job.ClaimedAt.Sub(due), 0).Seconds(), i.set(setKey{metric: metricStartDelay, dest: job.Queue}))
	}
	start := time.Now()
	done := false
	defer func() {
		if done {
			return
		}
		// A panic counts as an error: record the run, then let the panic
		// go on to the lifecycle, which settles the job.
		if p := recover(); p != nil {
			i.record(ctx, span, job, start, fmt.Errorf("handler panicked: %v", p))
			panic(p)
		}
	}()
	err := run(ctx)
	done = true
	i.record(ctx, span, job, start, err)
	return err
}

// record sets a finished run's outcome on its span and records its
// duration by outcome.
func (i *Instrumentation) record(ctx context.Context, span trace.Span, job *store.Job, start time.Time, err error) {
	outcome := store.HandlerOutcome(ctx, job, err)
	name := OutcomeName(outcome)
	if span.IsRecording() {
		span.SetAttributes(KeyOutcome.String(name))
	}
	switch outcome {
	case store.OutcomeRetried, store.OutcomeFailed:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	i.process.Record(ctx, time.Since(start).Seconds(),
		i.set(setKey{metric: metricProcess, dest: job.Queue, op: operationProcess, outcome: name}))
}

// OutcomeName is the alkstore.job.outcome value of a handler's outcome:
// completed, retried, dead, snoozed, cancelled (the claim was lost: the
// job was cancelled or taken by another worker), released (a stop gave it
// back) or settled_by_handler.
func OutcomeName(o store.Outcome) string {
	switch o {
	case store.OutcomeAcked:
		return "completed"
	case store.OutcomeRetried:
		return "retried"
	case store.OutcomeFailed:
		return "dead"
	case store.OutcomeSnoozed:
		return "snoozed"
	case store.OutcomeClaimLost:
		return "cancelled"
	case store.OutcomeReleased:
		return "released"
	case store.OutcomeSettledByHandler:
		return "settled_by_handler"
	}
	return o.String()
}

// ProcessEvent runs fn for one event a stream consumer (a receiver, or
// ReadFromConsumer) handles, in a consumer span continuing the trace of
// its publish, and records its duration by outcome (completed or failed).
func (i *Instrumentation) ProcessEvent(ctx context.Context, consumer string, ev store.Event, fn func(ctx context.Context) error) error {
	parent := i.extract(ctx, ev.Headers)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	if link := trace.LinkFromContext(parent); link.SpanContext.IsValid() {
		opts = append(opts, trace.WithLinks(link))
	}
	ctx, span := i.tracer.Start(parent, operationProcess+" "+ev.Stream, opts...)
	defer span.End()
	recording := span.IsRecording()
	if recording {
		span.SetAttributes(KeySystem.String(System), KeyDestination.String(ev.Stream),
			KeyOperationName.String(operationProcess), KeyOperationType.String(operationTypeProc),
			KeyMessageID.String(strconv.FormatInt(ev.Offset, 10)))
		if consumer != "" {
			span.SetAttributes(KeyConsumerGroup.String(consumer))
		}
	}
	start := time.Now()
	err := fn(ctx)
	outcome := "completed"
	if err != nil {
		outcome = "failed"
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	if recording {
		span.SetAttributes(KeyOutcome.String(outcome))
	}
	i.process.Record(ctx, time.Since(start).Seconds(),
		i.set(setKey{metric: metricProcess, dest: ev.Stream, consumer: consumer, op: operationProcess, outcome: outcome}))
	return err
}

// GroupHandler wraps a consumer group's handler (Group.Consume,
// client.HandleGroup) so each event runs in ProcessEvent's consumer span,
// continuing the trace of its publish, with the group's name as the
// consumer group.
func (i *Instrumentation) GroupHandler(g *store.Group, h store.GroupHandler) store.GroupHandler {
	name := g.Name()
	return func(ctx context.Context, ev store.Event) error {
		return i.ProcessEvent(ctx, name, ev, func(ctx context.Context) error { return h(ctx, ev) })
	}
}

// GroupTxHandler is GroupHandler for a transactional handler
// (Group.ConsumeTx, client.HandleGroupTx).
func (i *Instrumentation) GroupTxHandler(g *store.Group, h store.GroupTxHandler) store.GroupTxHandler {
	name := g.Name()
	return func(ctx context.Context, tx store.Tx, ev store.Event) error {
		return i.ProcessEvent(ctx, name, ev, func(ctx context.Context) error { return h(ctx, tx, ev) })
	}
}
