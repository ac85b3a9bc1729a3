package alkotel_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
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
	for _, ev := range sp.Events() {
		if ev.Name != alkotel.EventPropagationDropped {
			continue
		}
		a := map[attribute.Key]attribute.Value{}
		for _, kv := range ev.Attributes {
			a[kv.Key] = kv.Value
		}
		assert.EqualValues(t, store.MaxHeadersSize, a[alkotel.KeyHeadersLimit].AsInt64(), "the event says the bound")
		return a[alkotel.KeyDroppedFields].AsStringSlice(), a[alkotel.KeyDroppedMessages].AsInt64(), true
	}
	return nil, 0, false
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

// A request's 5 KB of W3C baggage (within W3C's 8 KiB) is left out of the
// headers, where it made every enqueue of the request fail; the
// traceparent rides, and baggage that fits too.
func TestBigBaggageLeftOut(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		c := testCtx(t)
		ctx, s, tel := producing(t, dsn)
		m1, err := baggage.NewMember("user-prefs", strings.Repeat("x", 2500))
		require.NoError(t, err)
		m2, err := baggage.NewMember("experiments", strings.Repeat("y", 2500))
		require.NoError(t, err)
		big, err := baggage.New(m1, m2)
		require.NoError(t, err)
		q := s.Queue("baggage")
		id, err := q.Enqueue(baggage.ContextWithBaggage(ctx, big), []byte("job"), store.EnqueueOpts{})
		require.NoError(t, err, "baggage never fails the enqueue")
		j, err := q.Job(c, id)
		require.NoError(t, err)
		assert.NotEmpty(t, j.Headers["traceparent"])
		assert.NotContains(t, j.Headers, "baggage")
		f, _, ok := dropped(t, spanNamed(t, tel.spans.Ended(), "enqueue baggage"))
		require.True(t, ok)
		assert.Equal(t, []string{"baggage"}, f)

		// Baggage that fits still rides.
		small, err := baggage.New(m1)
		require.NoError(t, err)
		q = s.Queue("small-baggage")
		id, err = q.Enqueue(baggage.ContextWithBaggage(ctx, small), nil, store.EnqueueOpts{Headers: headersOf(100)})
		require.NoError(t, err)
		j, err = q.Job(c, id)
		require.NoError(t, err)
		assert.NotEmpty(t, j.Headers["traceparent"])
		assert.Equal(t, small.String(), j.Headers["baggage"])
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
