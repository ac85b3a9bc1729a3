// Package alkotel instruments alkstore with OpenTelemetry: producer spans on
// every publish and enqueue that carry W3C trace context in the message's
// headers, consumer spans on job handlers and stream consumers that
// continue that trace, and metrics of the store's queues and streams.
// The trace context shares store.MaxHeadersSize with the application's
// headers, and store.MaxBatchSize with a batch's payloads, and goes only
// where it fits (see InsertMiddleware): telemetry never fails a write.
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
//
// Job metrics, recorded by the handler side (Middleware, Handler,
// TxHandler):
//
//   - messaging.process.duration (s): how long the handler ran, by
//     alkstore.job.outcome (ResultName: what the lifecycle did, reported
//     after the settle)
//   - alkstore.job.start_delay (s): every job, from its due time (created
//     or run_at, whichever is later) to its claim: wake latency plus
//     queueing behind other jobs
//   - alkstore.job.wake_latency (s): only the jobs that found their worker
//     with a free slot and were claimed by the claim their wake started
//     (store.Job.WakeLatency says exactly which): from the enqueue
//     (CreatedAt, read before the insert) to that claim's return, so the
//     enqueue's commit, the wake's way to the worker (NOTIFY, or SQLite's
//     change watcher) and the claim; a backlog, delayed and retried jobs
//     are not in it. Across machines the clocks' skew adds in.
package alkotel

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	metricWakeLatency  = "alkstore.job.wake_latency"
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
	links bool
}

// WithTracerProvider sets the tracer provider (default otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithMeterProvider sets the meter provider (default otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithPropagator sets the propagator that writes and reads trace context in
// headers (default: W3C trace context and baggage). A field it writes that
// the store refuses as a header (store.CheckHeader) is left out.
func WithPropagator(p propagation.TextMapPropagator) Option { return func(c *config) { c.props = p } }

// WithProducerLinks also links each consumer span to its producer's span,
// which is already its parent (off by default: a link costs every job a
// few allocations, for tools that follow links rather than parents).
func WithProducerLinks() Option { return func(c *config) { c.links = true } }

// Instrumentation holds alkotel's tracer, meter and instruments.
type Instrumentation struct {
	tracer     trace.Tracer
	meter      metric.Meter
	props      propagation.TextMapPropagator
	links      bool
	sent       metric.Int64Counter
	process    metric.Float64Histogram
	startDelay metric.Float64Histogram
	wakeLat    metric.Float64Histogram
	// fields are the header keys the propagator reads: a message without
	// any is not handed to it.
	fields []string
	// sets caches the metric attribute sets by setKey: building a set
	// sorts and allocates, and a queue's few sets serve every job.
	sets sync.Map
	// queues caches each queue's *queueInst.
	queues sync.Map
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
// when they carry none.
func (i *Instrumentation) extract(ctx context.Context, headers map[string]string) context.Context {
	if !i.carries(headers) {
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
	i := &Instrumentation{tracer: c.tp.Tracer(ScopeName), meter: c.mp.Meter(ScopeName), props: c.props, fields: c.props.Fields(),
		links: c.links}
	i.sent, _ = i.meter.Int64Counter(metricSent, metric.WithUnit("{message}"),
		metric.WithDescription("Events published and jobs enqueued (messaging.operation.name publish or enqueue)"))
	i.process, _ = i.meter.Float64Histogram(metricProcess, metric.WithUnit("s"),
		metric.WithDescription("How long a job handler or event consumer ran, by alkstore.job.outcome"))
	i.startDelay, _ = i.meter.Float64Histogram(metricStartDelay, metric.WithUnit("s"),
		metric.WithDescription("From a job's due time (created or run_at, whichever is later) to its claim: wake latency plus queueing"))
	i.wakeLat, _ = i.meter.Float64Histogram(metricWakeLatency, metric.WithUnit("s"),
		metric.WithDescription("From the enqueue of a job that found its worker with a free slot to the claim its wake started (store.Job.WakeLatency)"))
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

// fieldCarrier collects what the propagator writes, in the order it
// writes it, once per insert: every message of the call carries the same.
// buf holds the usual three fields (traceparent, tracestate, baggage);
// carriers are pooled, so an insert allocates none.
type fieldCarrier struct {
	fields []field
	buf    [3]field
}

type field struct{ key, value string }

var fieldCarriers = sync.Pool{New: func() any {
	c := &fieldCarrier{}
	c.fields = c.buf[:0]
	return c
}}

// release returns c to the pool without the strings it held.
func (c *fieldCarrier) release() {
	clear(c.fields)
	c.fields = c.fields[:0]
	fieldCarriers.Put(c)
}

func (c *fieldCarrier) Get(key string) string {
	for _, f := range c.fields {
		if f.key == key {
			return f.value
		}
	}
	return ""
}

func (c *fieldCarrier) Set(key, value string) {
	for k := range c.fields {
		if c.fields[k].key == key {
			c.fields[k].value = value
			return
		}
	}
	c.fields = append(c.fields, field{key, value})
}

func (c *fieldCarrier) Keys() []string {
	keys := make([]string, len(c.fields))
	for k, f := range c.fields {
		keys[k] = f.key
	}
	return keys
}

// fieldRank orders the propagated fields by what they are worth when the
// headers' room runs short: the trace's identity, then its vendors'
// state, then the rest (baggage) as the propagator wrote it.
func fieldRank(key string) int {
	switch key {
	case "traceparent":
		return 0
	case "tracestate":
		return 1
	}
	return 2
}

// The producer span's event when propagated fields were left out of
// messages: fields the store refuses (KeyInvalidFields: an empty key, or a
// key or value that is not valid UTF-8 or holds a NUL byte, from a
// propagator given WithPropagator) out of every message; fields that would
// have pushed a message's headers past store.MaxHeadersSize out of that
// message (W3C baggage, which lists members, keeps there its leading
// members that fit, if any, and is named all the same); fields that would
// have pushed a batch past store.MaxBatchSize out of the whole batch
// (KeyBatchLimit then says the bound). It says which fields, in how many
// of the call's messages, and the headers' bound.
const (
	EventPropagationDropped = "alkstore.propagation.dropped"
	KeyDroppedFields        = attribute.Key("alkstore.propagation.dropped_fields")
	KeyDroppedMessages      = attribute.Key("alkstore.propagation.dropped_messages")
	KeyInvalidFields        = attribute.Key("alkstore.propagation.invalid_fields")
	KeyHeadersLimit         = attribute.Key("alkstore.headers.max_size")
	KeyBatchLimit           = attribute.Key("alkstore.batch.max_size")
)

// inject writes ctx's propagated fields into every message's headers, each
// only where the store takes it: a field the store refuses goes nowhere; a
// batch gets only the fields (traceparent first, then tracestate, only
// with it, then the rest, such as baggage) that keep it within
// store.MaxBatchSize; and a message gets each of those only if it still
// fits within store.MaxHeadersSize beside the headers already there
// (baggage that does not fit whole: its leading members that fit).
// Telemetry must never fail the application's write. A message whose own
// headers are past the bound gets nothing, and a batch already past its
// bound is not cut (either error is the application's). What was left out
// is an event on span.
func (i *Instrumentation) inject(ctx context.Context, span trace.Span, in *store.Insert) {
	carrier := fieldCarriers.Get().(*fieldCarrier)
	defer carrier.release()
	i.props.Inject(ctx, carrier)
	fields := carrier.fields
	if len(fields) == 0 {
		return
	}
	slices.SortStableFunc(fields, func(a, b field) int { return fieldRank(a.key) - fieldRank(b.key) })
	var dropped, invalid []string
	fields = slices.DeleteFunc(fields, func(f field) bool {
		if store.CheckHeader(f.key, f.value) != nil {
			invalid = append(invalid, f.key)
			return true
		}
		return false
	})
	dropped = append(dropped, invalid...)
	if slices.Contains(invalid, "traceparent") {
		// A tracestate means nothing without its traceparent.
		fields = slices.DeleteFunc(fields, func(f field) bool {
			if f.key == "tracestate" {
				dropped = append(dropped, f.key)
				return true
			}
			return false
		})
	}
	fit := fitBatch(in, fields)
	for _, f := range fields[fit:] {
		dropped = append(dropped, f.key)
	}
	batchCut := fit < len(fields)
	fields = fields[:fit]
	cut := len(dropped) > 0 // out of every message
	droppedMsgs := 0
	for k := range in.Messages {
		m := &in.Messages[k]
		size := headersSize(m.Headers)
		if size > store.MaxHeadersSize {
			continue
		}
		left, noParent := cut, false
		for _, f := range fields {
			value, grow := f.value, len(f.key)+len(f.value)
			if old, ok := m.Headers[f.key]; ok {
				grow -= len(f.key) + len(old)
			}
			if size+grow > store.MaxHeadersSize && f.key == "baggage" {
				// Its first members that fit, if any (else it goes whole).
				if v := baggageFitting(value, len(value)-(size+grow-store.MaxHeadersSize)); v != "" {
					value, grow, left = v, grow-(len(f.value)-len(v)), true
					if !slices.Contains(dropped, f.key) {
						dropped = append(dropped, f.key)
					}
				}
			}
			// A tracestate means nothing without its traceparent.
			if size+grow > store.MaxHeadersSize || (noParent && f.key == "tracestate") {
				left, noParent = true, noParent || f.key == "traceparent"
				if !slices.Contains(dropped, f.key) {
					dropped = append(dropped, f.key)
				}
				continue
			}
			m.SetHeader(f.key, value)
			size += grow
		}
		if left {
			droppedMsgs++
		}
	}
	if droppedMsgs > 0 {
		attrs := []attribute.KeyValue{KeyDroppedFields.StringSlice(dropped),
			KeyDroppedMessages.Int(droppedMsgs), KeyHeadersLimit.Int(store.MaxHeadersSize)}
		if len(invalid) > 0 {
			attrs = append(attrs, KeyInvalidFields.StringSlice(invalid))
		}
		if batchCut {
			attrs = append(attrs, KeyBatchLimit.Int64(store.MaxBatchSize))
		}
		span.AddEvent(EventPropagationDropped, trace.WithAttributes(attrs...))
	}
}

// baggageFitting returns W3C baggage's first members (comma-separated:
// commas within a value are percent-encoded) that fit in room bytes: all
// of v when it fits, "" when not even the first member does.
func baggageFitting(v string, room int) string {
	if len(v) <= room {
		return v
	}
	fits := ""
	for i := 0; i < len(v); i++ {
		if v[i] != ',' {
			continue
		}
		members := strings.TrimRight(v[:i], " \t") // W3C's optional whitespace
		if len(members) > room {
			break
		}
		fits = members
	}
	return fits
}

// fitBatch returns how many of fields (ranked) a batch can carry in every
// message and stay within store.MaxBatchSize, as the store counts it
// (store.Insert.Size): each message's stored headers grow by at most the
// fields' own stored size (store.StoredHeadersSize), so a batch the store
// takes without them it takes with them. One message is far below the
// bound (its payload is at most store.MaxPayloadSize, 4 MiB), and a batch
// already past it fails whatever telemetry does: both carry every field.
func fitBatch(in *store.Insert, fields []field) int {
	if len(in.Messages) < 2 || len(fields) == 0 {
		return len(fields)
	}
	room := store.MaxBatchSize - in.Size()
	if room < 0 {
		return len(fields)
	}
	n := int64(len(in.Messages))
	kept := len(fields)
	for ; kept > 0; kept-- {
		h := make(map[string]string, kept)
		for _, f := range fields[:kept] {
			h[f.key] = f.value
		}
		if n*int64(store.StoredHeadersSize(h)) <= room {
			break
		}
	}
	return kept
}

// headersSize is what store.MaxHeadersSize bounds: the bytes of every key
// and value added up.
func headersSize(h map[string]string) int {
	size := 0
	for k, v := range h {
		size += len(k) + len(v)
	}
	return size
}

// InsertMiddleware returns the store middleware that starts a producer span
// per publish or enqueue call (one for a batch, with its message count),
// writes its trace context into every message's headers, and counts the
// messages sent. The propagated fields share store.MaxHeadersSize with the
// application's headers, and a batch's store.MaxBatchSize with its
// payloads: a field that would push a message past the first is left out
// of that message (of baggage, only the members that do not fit), one
// that would push a batch past the second out of the batch (traceparent
// is the last to go), and one the store refuses (from a propagator given
// WithPropagator) out of every message (see EventPropagationDropped), so
// telemetry never makes a write fail that passes without it.
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
				i.inject(ctx, span, in)
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
// span is its parent; also a link WithProducerLinks), and records the handler's duration
// by outcome (ResultName: what the lifecycle actually did, reported by
// store.Job.OnResult once the job was settled; the span ends then). Only
// retried, dead and unsettled runs mark the span as failed: a snooze, a
// cancel, a lost claim or a stop do not.
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

// queueInst is what every job of one queue shares: built once per queue,
// so a job's span and measurements allocate no names, attributes,
// attribute sets or option lists of their own.
type queueInst struct {
	dest     string
	spanName string
	attrs    [queueAttrs]attribute.KeyValue // the queue's span attributes
	delay    []metric.RecordOption          // start delay's and wake latency's set
	outcomes map[string][]metric.RecordOption
}

// queueAttrs and jobAttrs count a consumer span's attributes: the queue's
// (system, destination, operation name and type), then the job's (message
// id, attempt, outcome).
const (
	queueAttrs = 4
	jobAttrs   = queueAttrs + 3
)

// outcomeNames are every ResultName, whose attribute sets queueInst holds.
var outcomeNames = []string{"completed", "retried", "dead", "snoozed", "cancelled", "lost", "released",
	"settled_by_handler", "unsettled"}

// consumerKind starts consumer spans.
var consumerKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}

// queue returns the shared instrumentation of the queue called name.
func (i *Instrumentation) queue(name string) *queueInst {
	if q, ok := i.queues.Load(name); ok {
		return q.(*queueInst)
	}
	q := &queueInst{dest: name, spanName: operationProcess + " " + name,
		attrs: [queueAttrs]attribute.KeyValue{KeySystem.String(System), KeyDestination.String(name),
			KeyOperationName.String(operationProcess), KeyOperationType.String(operationTypeProc)},
		delay: []metric.RecordOption{i.set(setKey{metric: metricStartDelay, dest: name})}, outcomes: map[string][]metric.RecordOption{}}
	for _, o := range outcomeNames {
		q.outcomes[o] = []metric.RecordOption{i.set(setKey{metric: metricProcess, dest: name, op: operationProcess, outcome: o})}
	}
	v, _ := i.queues.LoadOrStore(name, q)
	return v.(*queueInst)
}

// jobSpan is one job's run as its span sees it, until the lifecycle
// reports the run's result. jobSpans are reused (jobSpanPool): the
// handler's return (stop) and the result (result) each release it once,
// and the second puts it back.
type jobSpan struct {
	i     *Instrumentation
	ctx   context.Context
	span  trace.Span
	qi    *queueInst
	job   *store.Job
	start time.Time
	took  time.Duration
	// report is result, bound once per jobSpan (a method value allocates).
	report func(store.JobResult)
	// attrs are the span's attributes, set in one SetAttributes call when
	// the run ends: the SDK copies them into one slice of their size
	// (a call at the start and another at the end grew it twice).
	attrs    [jobAttrs]attribute.KeyValue
	released atomic.Int32
}

var jobSpanPool = sync.Pool{New: func() any { return new(jobSpan) }}

func (js *jobSpan) result(res store.JobResult) {
	js.i.finish(js, res)
	js.release()
}

// release puts js back once both its handler returned and its result was
// reported.
func (js *jobSpan) release() {
	if js.released.Add(1) < 2 {
		return
	}
	report := js.report
	*js = jobSpan{report: report} // drop the job, the span and the context
	jobSpanPool.Put(js)
}

// runInSpan runs one job's handler in a consumer span continuing the trace
// of its enqueue, and records its duration by outcome once the lifecycle
// settled the job. What every job of the queue shares is built once
// (queueInst); the propagator runs only on headers that carry its fields.
func (i *Instrumentation) runInSpan(ctx context.Context, job *store.Job, run func(ctx context.Context) error) error {
	qi := i.queue(job.Queue)
	opts := consumerKind
	parent := ctx
	if i.carries(job.Headers) {
		parent = i.props.Extract(ctx, headerCarrier(job.Headers))
		if i.links {
			if link := trace.LinkFromContext(parent); link.SpanContext.IsValid() {
				opts = []trace.SpanStartOption{consumerKind[0], trace.WithLinks(link)}
			}
		}
	}
	ctx, span := i.tracer.Start(parent, qi.spanName, opts...)
	if job.ClaimedAt != nil {
		due := job.RunAt
		if job.CreatedAt.After(due) {
			due = job.CreatedAt
		}
		i.startDelay.Record(ctx, max(job.ClaimedAt.Sub(due), 0).Seconds(), qi.delay...)
	}
	if d, ok := job.WakeLatency(); ok {
		i.wakeLat.Record(ctx, d.Seconds(), qi.delay...)
	}
	js := jobSpanPool.Get().(*jobSpan)
	if js.report == nil {
		js.report = js.result
	}
	js.i, js.ctx, js.span, js.qi, js.job, js.start = i, ctx, span, qi, job, time.Now()
	if job.OnResult(js.report) {
		// The lifecycle reports the result once it settled the job (a
		// panic included, which it turns into an error), after the
		// handler returned.
		defer js.stop()
		return run(ctx)
	}
	js.released.Store(1) // no stop: the result alone releases it
	return js.runPredicted(run)
}

// stop notes how long the handler ran.
func (js *jobSpan) stop() {
	js.took = time.Since(js.start)
	js.release()
}

// runPredicted runs a job the lifecycle does not run (so reports no
// result): its outcome is the result's prediction (store.HandlerOutcome).
// Kept out of runInSpan, whose frame every job's goroutine stack holds.
//
//go:noinline
func (js *jobSpan) runPredicted(run func(ctx context.Context) error) error {
	done := false
	ctx, job := js.ctx, js.job
	defer func() {
		if done {
			return
		}
		// A panic counts as an error: record the run, then let the panic
		// go on to whoever runs the handler.
		if p := recover(); p != nil {
			err := fmt.Errorf("handler panicked: %v", p)
			js.took = time.Since(js.start)
			js.result(store.JobResult{Outcome: store.HandlerOutcome(ctx, job, err), Err: err})
			panic(p)
		}
	}()
	err := run(ctx)
	done = true
	js.took = time.Since(js.start)
	js.result(store.JobResult{Outcome: store.HandlerOutcome(ctx, job, err), Err: err})
	return err
}

// carries reports whether headers hold a field the propagator reads.
func (i *Instrumentation) carries(headers map[string]string) bool {
	if len(headers) == 0 {
		return false
	}
	for _, f := range i.fields {
		if _, ok := headers[f]; ok {
			return true
		}
	}
	return false
}

// finish sets a settled run's attributes and outcome on its span, ends
// it, and records the handler's duration by outcome.
func (i *Instrumentation) finish(js *jobSpan, res store.JobResult) {
	name := ResultName(res)
	span, qi, job := js.span, js.qi, js.job
	if span.IsRecording() {
		js.attrs = [jobAttrs]attribute.KeyValue{qi.attrs[0], qi.attrs[1], qi.attrs[2], qi.attrs[3],
			KeyMessageID.String(strconv.FormatInt(job.ID, 10)), KeyAttempt.Int(job.Attempts), KeyOutcome.String(name)}
		span.SetAttributes(js.attrs[:]...)
		if failed := res.Outcome == store.OutcomeRetried || res.Outcome == store.OutcomeFailed; failed || res.SettleErr != nil {
			err := res.Err
			if !failed {
				err = res.SettleErr
			}
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
	set, ok := qi.outcomes[name]
	if !ok {
		set = []metric.RecordOption{i.set(setKey{metric: metricProcess, dest: qi.dest, op: operationProcess, outcome: name})}
	}
	i.process.Record(js.ctx, js.took.Seconds(), set...)
}

// ResultName is the alkstore.job.outcome value of a settled run:
// OutcomeName of its outcome, except "unsettled" when its settle failed
// (res.SettleErr); for a lost claim, "cancelled" only when the job was
// found cancelled and "lost" otherwise (its claim lapsed and another worker
// took it, or it was deleted); and for a job its handler settled itself,
// the name of that settle (res.SettledAs: "completed", "retried", "dead",
// "snoozed", "released" or "cancelled"), as the client's job events name
// it. "settled_by_handler" is left for a run outside the lifecycle, whose
// settle is not known.
func ResultName(res store.JobResult) string {
	switch {
	case res.SettleErr != nil:
		return "unsettled"
	case res.Outcome == store.OutcomeClaimLost && res.State != store.JobCancelled:
		return "lost"
	case res.Outcome == store.OutcomeSettledByHandler && res.SettledAs != 0:
		return OutcomeName(res.SettledAs)
	}
	return OutcomeName(res.Outcome)
}

// OutcomeName is the alkstore.job.outcome value of a handler's outcome:
// completed, retried, dead, snoozed, cancelled (the claim was lost: the
// job was cancelled or taken by another worker; and OutcomeCancelled, a
// handler's own Cancel), released (a stop gave it back) or
// settled_by_handler.
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
	case store.OutcomeCancelled:
		return "cancelled"
	}
	return o.String()
}

// ProcessEvent runs fn for one event a stream consumer (a receiver, or
// ReadFromConsumer) handles, in a consumer span continuing the trace of
// its publish, and records its duration by outcome (completed or failed).
func (i *Instrumentation) ProcessEvent(ctx context.Context, consumer string, ev store.Event, fn func(ctx context.Context) error) error {
	parent := i.extract(ctx, ev.Headers)
	opts := consumerKind
	if link := trace.LinkFromContext(parent); i.links && link.SpanContext.IsValid() {
		opts = []trace.SpanStartOption{consumerKind[0], trace.WithLinks(link)}
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
