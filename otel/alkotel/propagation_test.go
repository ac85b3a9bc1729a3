package alkotel_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/alkstore/alkstore/otel/alkotel"
	"github.com/alkstore/alkstore/store"
)

// headersOf returns application headers of exactly size bytes (key and
// value added up, as store.MaxHeadersSize counts them).
func headersOf(size int) map[string]string {
	return map[string]string{"tenant": strings.Repeat("t", size-len("tenant"))}
}

// dropped returns the fields and message count of span's
// EventPropagationDropped; ok false when it has none.
func dropped(t *testing.T, sp sdktrace.ReadOnlySpan) (fields []string, messages int64, ok bool) {
	t.Helper()
	a, ok := droppedEvent(t, sp)
	return a[alkotel.KeyDroppedFields].AsStringSlice(), a[alkotel.KeyDroppedMessages].AsInt64(), ok
}

// droppedEvent returns the attributes of span's EventPropagationDropped;
// ok false when it has none.
func droppedEvent(t *testing.T, sp sdktrace.ReadOnlySpan) (a map[attribute.Key]attribute.Value, ok bool) {
	t.Helper()
	for _, ev := range sp.Events() {
		if ev.Name != alkotel.EventPropagationDropped {
			continue
		}
		a := map[attribute.Key]attribute.Value{}
		for _, kv := range ev.Attributes {
			a[kv.Key] = kv.Value
		}
		assert.EqualValues(t, store.MaxHeadersSize, a[alkotel.KeyHeadersLimit].AsInt64(), "the event says the bound")
		return a, true
	}
	return nil, false
}

// producing opens a store instrumented with the default propagator (trace
// context and baggage) and returns it with the context of a sampled
// request span.
func producing(t *testing.T, dsn string) (context.Context, *store.Store, *telemetry) {
	tel := newTelemetry()
	s := open(t, dsn, tel)
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans)).Tracer("app")
	ctx, root := tracer.Start(testCtx(t), "request")
	t.Cleanup(func() { root.End() })
	return ctx, s, tel
}

// traceparent is the bytes of a traceparent header, key and value.
const traceparent = len("traceparent") + len("00-") + 32 + 1 + 16 + 1 + 2 // 66

// The propagated fields share MaxHeadersSize with the application's
// headers, and telemetry never fails the write: a field that would push a
// message past the bound is left out of that message, and the producer
// span says so. Enqueues, batches of jobs and of events, and the outbox
// alike.
func TestTraceContextLeftOutWhereItDoesNotFit(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		c := testCtx(t)
		ctx, s, tel := producing(t, dsn)
		fits, tight := headersOf(store.MaxHeadersSize-traceparent), headersOf(store.MaxHeadersSize-10)

		// One job: room for the traceparent exactly, then not.
		q := s.Queue("fits")
		id, err := q.Enqueue(ctx, nil, store.EnqueueOpts{Headers: fits})
		require.NoError(t, err)
		j, err := q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, fits["tenant"], j.Headers["tenant"])
		assert.Len(t, j.Headers["traceparent"], traceparent-len("traceparent"), "the traceparent fits exactly")
		_, _, ok := dropped(t, spanNamed(t, tel.spans.Ended(), "enqueue fits"))
		assert.False(t, ok, "nothing left out")

		q = s.Queue("tight")
		id, err = q.Enqueue(ctx, nil, store.EnqueueOpts{Headers: tight})
		require.NoError(t, err, "headers that pass alone pass with telemetry on")
		j, err = q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, tight, j.Headers, "the application's headers intact, no traceparent")
		f, n, ok := dropped(t, spanNamed(t, tel.spans.Ended(), "enqueue tight"))
		require.True(t, ok, "the span says the trace context was left out")
		assert.Equal(t, []string{"traceparent"}, f)
		assert.EqualValues(t, 1, n)
		assert.Len(t, tight, 1, "the caller's map is unchanged")

		// Batches: each message gets what fits beside its own headers.
		ids, err := s.Queue("batch").EnqueueMany(ctx, []store.NewJob{{Opts: store.EnqueueOpts{Headers: fits}}, {Opts: store.EnqueueOpts{Headers: tight}}, {}})
		require.NoError(t, err)
		var got []bool
		for _, id := range ids {
			j, err := s.Queue("batch").Job(c, id)
			require.NoError(t, err)
			got = append(got, j.Headers["traceparent"] != "")
		}
		assert.Equal(t, []bool{true, false, true}, got, "traceparent in the jobs it fits")
		_, n, ok = dropped(t, spanNamed(t, tel.spans.Ended(), "enqueue batch"))
		assert.True(t, ok)
		assert.EqualValues(t, 1, n, "left out of one message of the batch")

		offs, err := s.Stream("events").PublishMany(ctx, []store.Message{{Headers: tight}, {Headers: fits}})
		require.NoError(t, err)
		evs, err := s.Stream("events").ReadSince(c, offs[0]-1, 2)
		require.NoError(t, err)
		require.Len(t, evs, 2)
		assert.Equal(t, tight, evs[0].Headers)
		assert.NotEmpty(t, evs[1].Headers["traceparent"])
		_, _, ok = dropped(t, spanNamed(t, tel.spans.Ended(), "publish events"))
		assert.True(t, ok)

		ob := s.Outbox("hooks")
		id, err = ob.Enqueue(ctx, nil, store.EnqueueOpts{Headers: tight})
		require.NoError(t, err)
		j, err = ob.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, tight, j.Headers)

		// A tracestate rides after its traceparent, and never without it.
		ts, err := trace.ParseTraceState("vendor=abc")
		require.NoError(t, err)
		tsCtx := trace.ContextWithSpanContext(ctx, trace.SpanContextFromContext(ctx).WithTraceState(ts))
		state := len("tracestate") + len("vendor=abc")
		for name, tc := range map[string]struct {
			room             int
			parent, tsInside bool
		}{"both": {traceparent + state, true, true}, "parent": {traceparent + state - 1, true, false}, "neither": {traceparent - 1, false, false}} {
			q := s.Queue("state-" + name)
			id, err := q.Enqueue(tsCtx, nil, store.EnqueueOpts{Headers: headersOf(store.MaxHeadersSize - tc.room)})
			require.NoError(t, err, name)
			j, err := q.Job(c, id)
			require.NoError(t, err, name)
			assert.Equal(t, tc.parent, j.Headers["traceparent"] != "", "%s: traceparent", name)
			assert.Equal(t, tc.tsInside, j.Headers["tracestate"] == "vendor=abc", "%s: tracestate", name)
		}
	})
}

// A request's 5 KB of W3C baggage (within W3C's 8 KiB) does not fit the
// headers, where it made every enqueue of the request fail: the
// traceparent rides, and of the baggage its leading members that fit (one
// member of 2.5 KB of two, whichever the propagator wrote first), or none
// when not even the first fits (one of 4 KB); the span names it. Baggage
// that fits rides whole.
func TestBigBaggageCutToFit(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		c := testCtx(t)
		ctx, s, tel := producing(t, dsn)
		m1, err := baggage.NewMember("user-prefs", strings.Repeat("x", 2500))
		require.NoError(t, err)
		m2, err := baggage.NewMember("experiments", strings.Repeat("y", 2500))
		require.NoError(t, err)
		huge, err := baggage.NewMember("blob", strings.Repeat("z", 4050))
		require.NoError(t, err)
		small, err := baggage.New(m1)
		require.NoError(t, err)
		for _, tc := range []struct {
			queue   string
			members []baggage.Member
			rides   int // members stored
		}{{"two", []baggage.Member{m1, m2}, 1}, {"huge", []baggage.Member{huge}, 0}} {
			big, err := baggage.New(tc.members...)
			require.NoError(t, err)
			q := s.Queue(tc.queue)
			id, err := q.Enqueue(baggage.ContextWithBaggage(ctx, big), []byte("job"), store.EnqueueOpts{})
			require.NoError(t, err, "baggage never fails the enqueue")
			j, err := q.Job(c, id)
			require.NoError(t, err)
			assert.NotEmpty(t, j.Headers["traceparent"], tc.queue)
			got, err := baggage.Parse(j.Headers["baggage"])
			require.NoError(t, err, "%s: what rides is baggage", tc.queue)
			assert.Equal(t, tc.rides, got.Len(), tc.queue)
			for _, m := range got.Members() {
				assert.True(t, m.String() == big.Member(m.Key()).String(), "%s: member %s rides whole", tc.queue, m.Key())
			}
			f, n, ok := dropped(t, spanNamed(t, tel.spans.Ended(), "enqueue "+tc.queue))
			require.True(t, ok, tc.queue)
			assert.Equal(t, []string{"baggage"}, f, tc.queue)
			assert.EqualValues(t, 1, n, tc.queue)
		}

		// Baggage that fits still rides whole.
		q := s.Queue("small-baggage")
		id, err := q.Enqueue(baggage.ContextWithBaggage(ctx, small), nil, store.EnqueueOpts{Headers: headersOf(100)})
		require.NoError(t, err)
		j, err := q.Job(c, id)
		require.NoError(t, err)
		assert.NotEmpty(t, j.Headers["traceparent"])
		assert.Equal(t, small.String(), j.Headers["baggage"])
		_, _, ok := dropped(t, spanNamed(t, tel.spans.Ended(), "enqueue small-baggage"))
		assert.False(t, ok)
	})
}

// The application's own headers past the bound fail with its
// ErrInvalidArgument, as without telemetry (the size is its headers'
// alone), and the span does not claim anything was left out for them.
func TestOwnOversizeHeadersStillFail(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		ctx, s, tel := producing(t, dsn)
		_, err := s.Queue("over").Enqueue(ctx, nil, store.EnqueueOpts{Headers: headersOf(store.MaxHeadersSize + 1)})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		assert.Contains(t, err.Error(), "headers of 4097 bytes")
		_, _, ok := dropped(t, spanNamed(t, tel.spans.Ended(), "enqueue over"))
		assert.False(t, ok, "nothing was left out to make it pass")
	})
}

// atTheBound returns n payloads (aliasing one MaxPayloadSize buffer) whose
// batch, without headers, counts exactly store.MaxBatchSize: the most the
// store takes.
func atTheBound() [][]byte {
	buf := make([]byte, store.MaxPayloadSize)
	n := store.MaxBatchSize / store.MaxPayloadSize // 60
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = buf
	}
	payloads[n-1] = buf[:store.MaxPayloadSize-n*store.BatchElementOverhead]
	return payloads
}

// A batch at exactly MaxBatchSize passes the store's size check without
// telemetry; with it, the trace context that fits each message's headers
// would push the batch past the bound (review58a F1: "payload too large:
// the batch of 60 jobs is 251658313 bytes"). It is left out of the batch
// instead, and the producer span says so. The writes run with a cancelled
// context: the size check comes before any I/O, so the write reaching its
// I/O (context.Canceled) is the write passing the check, without moving
// 240 MiB through each engine.
func TestTraceContextLeftOutOfABatchAtMaxBatchSize(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		ctx, s, tel := producing(t, dsn)
		payloads := atTheBound()
		jobs := make([]store.NewJob, len(payloads))
		msgs := make([]store.Message, len(payloads))
		for i, p := range payloads {
			jobs[i].Payload, msgs[i].Payload = p, p
		}
		cut, cancel := context.WithCancel(ctx)
		cancel()
		for _, w := range []struct {
			span  string
			write func() error
		}{
			{"enqueue big", func() error { _, err := s.Queue("big").EnqueueMany(cut, jobs); return err }},
			{"publish big", func() error { _, err := s.Stream("big").PublishMany(cut, msgs); return err }},
		} {
			err := w.write()
			require.ErrorIs(t, err, context.Canceled, "%s: the write passed the size check", w.span)
			require.NotErrorIs(t, err, store.ErrPayloadTooLarge, "%s: telemetry failed a write that passes without it", w.span)
			f, n, ok := dropped(t, spanNamed(t, tel.spans.Ended(), w.span))
			require.True(t, ok, "%s: the span says the trace context was left out", w.span)
			assert.Equal(t, []string{"traceparent"}, f, w.span)
			assert.EqualValues(t, len(payloads), n, "%s: out of every message", w.span)
			a, _ := droppedEvent(t, spanNamed(t, tel.spans.Ended(), w.span))
			assert.EqualValues(t, store.MaxBatchSize, a[alkotel.KeyBatchLimit].AsInt64(), "%s: the event says the batch's bound", w.span)
			assert.NotContains(t, a, alkotel.KeyInvalidFields, w.span)
		}
	})
}

// A batch with room for its trace context keeps it, down to the byte:
// with room for the traceparent in every message (a PublishMany, whose
// size the middleware knows exactly) but not for the tracestate too, the
// tracestate alone is left out; one byte short of it, both are.
func TestTraceContextKeptInABatchWithRoomForIt(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		ctx, s, tel := producing(t, dsn)
		ts, err := trace.ParseTraceState("vendor=abc")
		require.NoError(t, err)
		sc := trace.SpanContextFromContext(ctx)
		ctx = trace.ContextWithSpanContext(ctx, sc.WithTraceState(ts))
		// A message's traceparent as stored: {"traceparent":"00-…-01"}.
		stored := len(`{"traceparent":""}`) + len(sc.TraceID().String()) + len(sc.SpanID().String()) + len("00---01")
		cut, cancel := context.WithCancel(ctx)
		cancel()
		for _, tc := range []struct {
			name    string
			less    int
			dropped []string
		}{{"room", 0, []string{"tracestate"}}, {"short", 1, []string{"traceparent", "tracestate"}}} {
			payloads := atTheBound()
			n := len(payloads)
			payloads[n-1] = payloads[0][:len(payloads[n-1])-n*stored+tc.less] // tc.less bytes more
			msgs := make([]store.Message, n)
			for i, p := range payloads {
				msgs[i].Payload = p
			}
			_, err := s.Stream(tc.name).PublishMany(cut, msgs)
			require.ErrorIs(t, err, context.Canceled, "%s: the write passed the size check", tc.name)
			f, m, ok := dropped(t, spanNamed(t, tel.spans.Ended(), "publish "+tc.name))
			require.True(t, ok, tc.name)
			assert.Equal(t, tc.dropped, f, tc.name)
			assert.EqualValues(t, n, m, tc.name)
		}
	})
}

// oddPropagator writes a field the store refuses (a NUL byte in its value).
type oddPropagator struct{}

func (oddPropagator) Inject(_ context.Context, c propagation.TextMapCarrier) {
	c.Set("x-odd", "a\x00b")
}
func (oddPropagator) Extract(ctx context.Context, _ propagation.TextMapCarrier) context.Context {
	return ctx
}
func (oddPropagator) Fields() []string { return []string{"x-odd"} }

// badParentPropagator writes a traceparent the store refuses (invalid
// UTF-8) and a tracestate, which means nothing without it.
type badParentPropagator struct{}

func (badParentPropagator) Inject(_ context.Context, c propagation.TextMapCarrier) {
	c.Set("traceparent", "00-\xff")
	c.Set("tracestate", "vendor=abc")
}
func (badParentPropagator) Extract(ctx context.Context, _ propagation.TextMapCarrier) context.Context {
	return ctx
}
func (badParentPropagator) Fields() []string { return []string{"traceparent", "tracestate"} }

// A propagator (WithPropagator) that writes a field the store refuses
// fails no write (review58a F2: "header "x-odd"'s value is not valid UTF-8
// without NUL bytes"): the field is left out like one that does not fit,
// the valid fields ride, and the producer span says so.
func TestInvalidPropagatedFieldLeftOut(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		tel := newTelemetry(alkotel.WithPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, oddPropagator{})))
		s := open(t, dsn, tel)
		tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans)).Tracer("app")
		ctx, root := tracer.Start(testCtx(t), "request")
		defer root.End()
		q := s.Queue("odd")
		id, err := q.Enqueue(ctx, []byte("x"), store.EnqueueOpts{Headers: map[string]string{"tenant": "acme"}})
		require.NoError(t, err, "telemetry failed a write")
		j, err := q.Job(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, "acme", j.Headers["tenant"])
		assert.NotEmpty(t, j.Headers["traceparent"], "the valid field rides")
		assert.NotContains(t, j.Headers, "x-odd")
		f, n, ok := dropped(t, spanNamed(t, tel.spans.Ended(), "enqueue odd"))
		require.True(t, ok, "the span says x-odd was left out")
		assert.Equal(t, []string{"x-odd"}, f)
		assert.EqualValues(t, 1, n)
		a, _ := droppedEvent(t, spanNamed(t, tel.spans.Ended(), "enqueue odd"))
		assert.Equal(t, []string{"x-odd"}, a[alkotel.KeyInvalidFields].AsStringSlice(), "the event says the store refuses it")
		assert.NotContains(t, a, alkotel.KeyBatchLimit)

		offs, err := s.Stream("odd").PublishMany(ctx, []store.Message{{Payload: []byte("a")}, {Payload: []byte("b")}})
		require.NoError(t, err, "telemetry failed a batch")
		evs, err := s.Stream("odd").ReadSince(ctx, offs[0]-1, 2)
		require.NoError(t, err)
		require.Len(t, evs, 2)
		for _, ev := range evs {
			assert.NotEmpty(t, ev.Headers["traceparent"])
			assert.NotContains(t, ev.Headers, "x-odd")
		}
		f, n, ok = dropped(t, spanNamed(t, tel.spans.Ended(), "publish odd"))
		require.True(t, ok)
		assert.Equal(t, []string{"x-odd"}, f)
		assert.EqualValues(t, 2, n)

		// A refused traceparent takes its tracestate along.
		tel = newTelemetry(alkotel.WithPropagator(badParentPropagator{}))
		s = open(t, dsn, tel)
		ctx, root = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans)).Tracer("app").Start(testCtx(t), "request")
		defer root.End()
		q = s.Queue("bad-parent")
		id, err = q.Enqueue(ctx, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err, "telemetry failed a write")
		j, err = q.Job(ctx, id)
		require.NoError(t, err)
		assert.Empty(t, j.Headers)
		a, ok = droppedEvent(t, spanNamed(t, tel.spans.Ended(), "enqueue bad-parent"))
		require.True(t, ok)
		assert.Equal(t, []string{"traceparent", "tracestate"}, a[alkotel.KeyDroppedFields].AsStringSlice())
		assert.Equal(t, []string{"traceparent"}, a[alkotel.KeyInvalidFields].AsStringSlice())
	})
}
