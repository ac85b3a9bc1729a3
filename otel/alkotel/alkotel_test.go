package alkotel_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/alkstore/alkstore/client"
	"github.com/alkstore/alkstore/internal/pgtest"
	"github.com/alkstore/alkstore/otel/alkotel"
	"github.com/alkstore/alkstore/store"
)

var (
	pgServer *pgtest.Server // nil when ALK_ENGINES leaves out pg
	engines  []string       // the engines ALK_ENGINES selects; both by default
)

func TestMain(m *testing.M) {
	var err error
	if engines, err = pgtest.Engines(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if !slices.Contains(engines, "pg") {
		code := m.Run()
		templates.Remove()
		os.Exit(code)
	}
	srv, err := pgtest.StartForTests()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pgServer = srv
	code := m.Run()
	srv.Stop()
	templates.Remove()
	os.Exit(code)
}

// templates are the migrated databases each test's are copies of: no test
// here is of migrations, and none counts what an Open's migration does.
var templates = pgtest.Templates{Migrate: func(ctx context.Context, dsn string) error {
	s, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	return s.Close()
}}

// eachEngine runs body on a fresh database of each engine: a copy of a
// migrated one (templates).
func eachEngine(t *testing.T, body func(t *testing.T, dsn string)) {
	for _, name := range engines {
		t.Run(name, func(t *testing.T) {
			dsn, err := templates.Fresh(context.Background(), pgServer, name, filepath.Join(t.TempDir(), "alk.db"))
			require.NoError(t, err, "a copy of the migrated %s template", name)
			body(t, dsn)
		})
	}
}

type telemetry struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	inst   *alkotel.Instrumentation
}

func newTelemetry(opts ...alkotel.Option) *telemetry {
	sr := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	inst := alkotel.New(append([]alkotel.Option{alkotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))),
		alkotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))}, opts...)...)
	return &telemetry{spans: sr, reader: reader, inst: inst}
}

func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func open(t *testing.T, dsn string, tel *telemetry) *store.Store {
	s, err := store.Open(testCtx(t), dsn, store.WithInsertMiddleware(tel.inst.InsertMiddleware()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func spanNamed(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	require.Failf(t, "no span", "%q among %d spans", name, len(spans))
	return nil
}

// One trace crosses the queue, the outbox and the stream: a request's span
// is the parent of the producer spans of its enqueue, outbox message and
// publish; the consumer spans of the client's handler, the outbox's
// deliverer and a stream receiver's consumer continue them.
func TestOneTraceAcrossQueueOutboxAndStream(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		c := testCtx(t)
		tel := newTelemetry()
		s := open(t, dsn, tel)
		q, ob, st := s.Queue("emails"), s.Outbox("hooks"), s.Stream("orders")

		tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans)).Tracer("app")
		ctx, root := tracer.Start(c, "POST /orders")
		jobID, err := q.Enqueue(ctx, []byte("mail"), store.EnqueueOpts{})
		require.NoError(t, err)
		var msgID int64
		require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			msgID, err = ob.EnqueueTx(ctx, tx, []byte("hook"), store.EnqueueOpts{})
			return err
		}))
		offs, err := st.PublishMany(ctx, []store.Message{{Payload: []byte("o1")}, {Payload: []byte("o2")}})
		require.NoError(t, err)
		root.End()

		var wg sync.WaitGroup
		wg.Add(2)
		cl := client.New(s, client.Opts{Middleware: []client.Middleware{tel.inst.Middleware()}, NoScheduler: true, NoJanitor: true})
		require.NoError(t, cl.Handle(q, store.WorkOpts{}, func(ctx context.Context, j *store.Job) error {
			defer wg.Done()
			assert.True(t, trace.SpanContextFromContext(ctx).IsValid(), "the handler runs in the consumer span")
			return nil
		}))
		require.NoError(t, cl.HandleOutbox(ob, store.OutboxOpts{}, func(ctx context.Context, m *store.Job) error {
			defer wg.Done()
			return nil
		}))
		require.NoError(t, cl.Start(c))
		r, err := st.Subscribe(c, "billing", store.SubscribeOpts{})
		require.NoError(t, err)
		for range offs {
			ev, err := r.Recv(c)
			require.NoError(t, err)
			require.NoError(t, tel.inst.ProcessEvent(c, "billing", ev, func(ctx context.Context) error { return nil }))
		}
		require.NoError(t, r.Close())
		wg.Wait()
		require.NoError(t, cl.Stop(c))

		spans := tel.spans.Ended()
		traceID := root.SpanContext().TraceID()
		for _, sp := range spans {
			assert.Equal(t, traceID, sp.SpanContext().TraceID(), "span %q is of the request's trace", sp.Name())
		}
		enq := spanNamed(t, spans, "enqueue emails")
		assert.Equal(t, trace.SpanKindProducer, enq.SpanKind())
		assert.Equal(t, root.SpanContext().SpanID(), enq.Parent().SpanID())
		a := attrs(enq)
		assert.Equal(t, "alkstore", a[alkotel.KeySystem].AsString())
		assert.Equal(t, "emails", a[alkotel.KeyDestination].AsString())
		assert.Equal(t, "enqueue", a[alkotel.KeyOperationName].AsString())
		assert.Equal(t, "send", a[alkotel.KeyOperationType].AsString())
		assert.Equal(t, fmt.Sprint(jobID), a[alkotel.KeyMessageID].AsString())

		work := spanNamed(t, spans, "process emails")
		assert.Equal(t, trace.SpanKindConsumer, work.SpanKind())
		assert.Equal(t, enq.SpanContext().SpanID(), work.Parent().SpanID(), "the handler continues the enqueue")
		assert.Empty(t, work.Links(), "the producer is the parent; a link too only WithProducerLinks")
		assert.Equal(t, "completed", attrs(work)[alkotel.KeyOutcome].AsString())
		assert.Equal(t, "process", attrs(work)[alkotel.KeyOperationType].AsString())

		obEnq := spanNamed(t, spans, "enqueue "+ob.QueueName())
		assert.True(t, attrs(obEnq)[alkotel.KeyTransactional].AsBool())
		assert.Equal(t, fmt.Sprint(msgID), attrs(obEnq)[alkotel.KeyMessageID].AsString())
		deliver := spanNamed(t, spans, "process "+ob.QueueName())
		assert.Equal(t, obEnq.SpanContext().SpanID(), deliver.Parent().SpanID())

		pub := spanNamed(t, spans, "publish orders")
		assert.Equal(t, trace.SpanKindProducer, pub.SpanKind())
		assert.EqualValues(t, 2, attrs(pub)[alkotel.KeyBatchCount].AsInt64())
		var consumed int
		for _, sp := range spans {
			if sp.Name() == "process orders" {
				consumed++
				assert.Equal(t, pub.SpanContext().SpanID(), sp.Parent().SpanID())
				assert.Equal(t, "billing", attrs(sp)[alkotel.KeyConsumerGroup].AsString())
			}
		}
		assert.Equal(t, 2, consumed)
	})
}

// The handler's duration is recorded by outcome: a snooze, a cancel and a
// permanent failure are outcomes of their own, not errors; only retried
// and dead jobs mark their span as failed.
func TestHandlerOutcomes(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		c := testCtx(t)
		tel := newTelemetry()
		s := open(t, dsn, tel)
		q := s.Queue("jobs")
		kinds := []string{"ok", "snooze", "retry", "permanent", "last", "cancel", "panic"}
		ids := map[string]int64{}
		for _, k := range kinds {
			opts := store.EnqueueOpts{}
			if k == "last" || k == "panic" {
				opts.MaxAttempts = 1
			}
			id, err := q.Enqueue(c, []byte(k), opts)
			require.NoError(t, err)
			ids[k] = id
		}
		running := make(chan struct{})
		done := make(chan string, len(kinds))
		h := tel.inst.Handler(func(ctx context.Context, j *store.Job) error {
			k := string(j.Payload)
			defer func() { done <- k }()
			switch k {
			case "snooze":
				return store.Snooze(time.Hour)
			case "retry", "last":
				return errors.New("boom")
			case "permanent":
				return store.Permanent(errors.New("bad input"))
			case "panic": // a panic counts as an error
				panic("boom")
			case "cancel":
				close(running)
				<-ctx.Done()
				return context.Cause(ctx)
			}
			return nil
		})
		wctx, stop := context.WithCancel(c)
		werr := make(chan error, 1)
		go func() {
			werr <- q.Work(wctx, store.WorkOpts{Concurrency: len(kinds), Backoff: func(int) time.Duration { return time.Hour }}, h)
		}()
		<-running
		require.NoError(t, q.Cancel(c, ids["cancel"]))
		for range kinds {
			<-done
		}
		stop()
		require.NoError(t, <-werr)

		outcome := map[string]string{}
		for _, sp := range tel.spans.Ended() {
			a := attrs(sp)
			id := a[alkotel.KeyMessageID].AsString()
			for k, want := range ids {
				if fmt.Sprint(want) == id && sp.SpanKind() == trace.SpanKindConsumer {
					outcome[k] = a[alkotel.KeyOutcome].AsString()
					failed := k == "retry" || k == "last" || k == "permanent" || k == "panic"
					assert.Equal(t, failed, sp.Status().Code.String() == "Error", "%s: span status %v", k, sp.Status())
				}
			}
		}
		assert.Equal(t, map[string]string{"ok": "completed", "snooze": "snoozed", "retry": "retried",
			"permanent": "dead", "last": "dead", "cancel": "cancelled", "panic": "dead"}, outcome)

		var rm metricdata.ResourceMetrics
		require.NoError(t, tel.reader.Collect(c, &rm))
		counts := map[string]uint64{}
		for _, m := range metrics(rm) {
			if m.Name != "messaging.process.duration" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				v, _ := dp.Attributes.Value(alkotel.KeyOutcome)
				counts[v.AsString()] += dp.Count
			}
		}
		assert.Equal(t, map[string]uint64{"completed": 1, "snoozed": 1, "retried": 1, "dead": 3, "cancelled": 1}, counts)
	})
}

func metrics(rm metricdata.ResourceMetrics) []metricdata.Metrics {
	var out []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		out = append(out, sm.Metrics...)
	}
	return out
}

// gauge reads one point of a gauge or counter by its attributes.
func point(t *testing.T, rm metricdata.ResourceMetrics, name string, match ...attribute.KeyValue) (float64, bool) {
	t.Helper()
	for _, m := range metrics(rm) {
		if m.Name != name {
			continue
		}
		check := func(set attribute.Set) bool {
			for _, kv := range match {
				if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
					return false
				}
			}
			return true
		}
		switch d := m.Data.(type) {
		case metricdata.Gauge[int64]:
			for _, dp := range d.DataPoints {
				if check(dp.Attributes) {
					return float64(dp.Value), true
				}
			}
		case metricdata.Gauge[float64]:
			for _, dp := range d.DataPoints {
				if check(dp.Attributes) {
					return dp.Value, true
				}
			}
		case metricdata.Sum[int64]:
			var sum int64
			found := false
			for _, dp := range d.DataPoints {
				if check(dp.Attributes) {
					sum, found = sum+dp.Value, true
				}
			}
			return float64(sum), found
		}
	}
	return 0, false
}

// The documented metrics exist and move when jobs and events move.
func TestMetricsMove(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		c := testCtx(t)
		tel := newTelemetry()
		s := open(t, dsn, tel)
		reg, err := tel.inst.ObserveStore(s)
		require.NoError(t, err)
		defer reg.Unregister()
		q, st := s.Queue("jobs"), s.Stream("ev")
		_, err = q.EnqueueMany(c, []store.NewJob{{}, {}, {}})
		require.NoError(t, err)
		_, err = st.PublishMany(c, []store.Message{{}, {}})
		require.NoError(t, err)
		require.NoError(t, st.SaveOffset(c, "reader", 0))
		member, err := st.Group("billing").Join(c, store.GroupOpts{})
		require.NoError(t, err)
		defer member.Close()
		k := "k"
		_, err = st.PublishMessage(c, store.Message{Key: &k, Payload: []byte("v")})
		require.NoError(t, err)

		collect := func() metricdata.ResourceMetrics {
			var rm metricdata.ResourceMetrics
			require.NoError(t, tel.reader.Collect(c, &rm))
			return rm
		}
		dest := func(n string) attribute.KeyValue { return alkotel.KeyDestination.String(n) }
		rm := collect()
		v, ok := point(t, rm, "messaging.client.sent.messages", dest("jobs"), alkotel.KeyOperationName.String("enqueue"))
		require.True(t, ok)
		assert.EqualValues(t, 3, v)
		v, ok = point(t, rm, "messaging.client.sent.messages", dest("ev"), alkotel.KeyOperationName.String("publish"))
		require.True(t, ok)
		assert.EqualValues(t, 3, v)
		v, ok = point(t, rm, "alkstore.queue.jobs", dest("jobs"), alkotel.KeyState.String("ready"))
		require.True(t, ok)
		assert.EqualValues(t, 3, v)
		_, ok = point(t, rm, "alkstore.queue.oldest_ready", dest("jobs"))
		assert.True(t, ok)
		v, ok = point(t, rm, "alkstore.consumer.lag", dest("ev"), alkotel.KeyConsumerGroup.String("reader"))
		require.True(t, ok)
		assert.EqualValues(t, 3, v)
		_, ok = point(t, rm, "alkstore.stream.headless_keys", dest("ev"))
		assert.True(t, ok)
		v, ok = point(t, rm, "alkstore.horizon.lag")
		require.True(t, ok)
		assert.Zero(t, v)
		_, ok = point(t, rm, "alkstore.horizon.waiting")
		assert.True(t, ok)
		_, ok = point(t, rm, "alkstore.horizon.holder_age")
		assert.True(t, ok)
		v, ok = point(t, rm, "alkstore.group.lag", dest("ev"), alkotel.KeyConsumerGroup.String("billing"))
		require.True(t, ok)
		assert.EqualValues(t, 3, v)
		v, ok = point(t, rm, "alkstore.group.members", dest("ev"), alkotel.KeyConsumerGroup.String("billing"))
		require.True(t, ok)
		assert.EqualValues(t, 1, v)

		jobs, err := q.Claim(c, "w", 2, time.Minute)
		require.NoError(t, err)
		evs, err := st.ReadFromConsumer(c, "reader", 10)
		require.NoError(t, err)
		require.NoError(t, st.SaveOffset(c, "reader", evs[len(evs)-1].Offset))
		rm = collect()
		v, _ = point(t, rm, "alkstore.queue.jobs", dest("jobs"), alkotel.KeyState.String("ready"))
		assert.EqualValues(t, 1, v)
		v, _ = point(t, rm, "alkstore.queue.jobs", dest("jobs"), alkotel.KeyState.String("running"))
		assert.EqualValues(t, 2, v)
		v, _ = point(t, rm, "alkstore.consumer.lag", dest("ev"), alkotel.KeyConsumerGroup.String("reader"))
		assert.Zero(t, v)

		// Handled jobs record how long they waited to start.
		for _, j := range jobs {
			require.NoError(t, tel.inst.Handler(func(context.Context, *store.Job) error { return nil })(c, j))
		}
		rm = collect()
		found := false
		for _, m := range metrics(rm) {
			if m.Name == "alkstore.job.start_delay" {
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					found = found || dp.Count == 2
				}
			}
		}
		assert.True(t, found, "alkstore.job.start_delay has the two handled jobs")
	})
}

// Transactional handlers are traced like plain ones: Queue.WorkTx through
// TxHandler and the client's HandleTx through Middleware each run their
// handler in a consumer span continuing the trace of the job's enqueue.
func TestTransactionalHandlersContinueTheTrace(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		c := testCtx(t)
		tel := newTelemetry()
		s := open(t, dsn, tel)
		direct, viaClient := s.Queue("tx-direct"), s.Queue("tx-client")

		tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans)).Tracer("app")
		ctx, root := tracer.Start(c, "POST /payments")
		_, err := direct.Enqueue(ctx, []byte("a"), store.EnqueueOpts{})
		require.NoError(t, err)
		_, err = viaClient.Enqueue(ctx, []byte("b"), store.EnqueueOpts{})
		require.NoError(t, err)
		root.End()

		inSpan := func(ctx context.Context) {
			assert.True(t, trace.SpanContextFromContext(ctx).IsValid(), "the handler runs in the consumer span")
		}
		wc, stop := context.WithCancel(c)
		ran := make(chan struct{})
		worked := make(chan error, 1)
		go func() {
			worked <- direct.WorkTx(wc, store.WorkOpts{}, tel.inst.TxHandler(func(ctx context.Context, tx store.Tx, j *store.Job) error {
				inSpan(ctx)
				close(ran)
				return nil
			}))
		}()
		<-ran
		stop()
		require.NoError(t, <-worked)

		done := make(chan struct{})
		cl := client.New(s, client.Opts{Middleware: []client.Middleware{tel.inst.Middleware()}, NoScheduler: true, NoJanitor: true})
		require.NoError(t, cl.HandleTx(viaClient, store.WorkOpts{}, func(ctx context.Context, tx store.Tx, j *store.Job) error {
			inSpan(ctx)
			close(done)
			return nil
		}))
		require.NoError(t, cl.Start(c))
		<-done
		require.NoError(t, cl.Stop(c))

		spans := tel.spans.Ended()
		for _, q := range []string{"tx-direct", "tx-client"} {
			enq := spanNamed(t, spans, "enqueue "+q)
			work := spanNamed(t, spans, "process "+q)
			assert.Equal(t, root.SpanContext().TraceID(), work.SpanContext().TraceID(), "%s: the request's trace", q)
			assert.Equal(t, enq.SpanContext().SpanID(), work.Parent().SpanID(), "%s: the handler continues the enqueue", q)
			assert.Equal(t, trace.SpanKindConsumer, work.SpanKind())
			assert.Equal(t, "completed", attrs(work)[alkotel.KeyOutcome].AsString(), q)
		}
	})
}

// TestGroupHandlerSpans: a consumer group's handlers, plain and
// transactional, run in consumer spans that continue the publish's trace and
// name the group.
func TestGroupHandlerSpans(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		c := testCtx(t)
		tel := newTelemetry()
		s := open(t, dsn, tel)
		st := s.Stream("orders")
		tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans)).Tracer("app")
		ctx, root := tracer.Start(c, "POST /orders")
		_, err := st.PublishWithKey(ctx, "k", []byte("o1"))
		require.NoError(t, err)
		root.End()

		for _, tx := range []bool{false, true} {
			g := st.Group(fmt.Sprint("billing-", tx))
			cc, cancel := context.WithCancel(c)
			done := make(chan error, 1)
			handled := make(chan struct{})
			seen := func(ctx context.Context) error {
				assert.True(t, trace.SpanContextFromContext(ctx).IsValid(), "the handler runs in the consumer span")
				close(handled)
				return nil
			}
			go func() {
				if tx {
					done <- g.ConsumeTx(cc, store.GroupOpts{}, tel.inst.GroupTxHandler(g, func(ctx context.Context, _ store.Tx, _ store.Event) error { return seen(ctx) }))
				} else {
					done <- g.Consume(cc, store.GroupOpts{}, tel.inst.GroupHandler(g, func(ctx context.Context, _ store.Event) error { return seen(ctx) }))
				}
			}()
			<-handled
			cancel()
			require.NoError(t, <-done)
		}
		var groups []string
		for _, sp := range tel.spans.Ended() {
			if sp.Name() == "process orders" {
				assert.Equal(t, root.SpanContext().TraceID(), sp.SpanContext().TraceID())
				assert.Equal(t, trace.SpanKindConsumer, sp.SpanKind())
				groups = append(groups, attrs(sp)[alkotel.KeyConsumerGroup].AsString())
			}
		}
		assert.ElementsMatch(t, []string{"billing-false", "billing-true"}, groups)
	})
}

// The consumer span and the duration metric carry what the lifecycle did
// after the handler returned: an ack that finds the claim taken by another
// worker is "lost", not "completed"; an outbox's last failed delivery is
// "dead", not "retried". Each run has exactly one consumer span.
func TestOutcomesAfterSettle(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		c := testCtx(t)
		tel := newTelemetry(alkotel.WithProducerLinks())
		s := open(t, dsn, tel)
		later, err := store.Open(c, dsn, store.WithClock(func() time.Time { return time.Now().Add(2 * time.Hour) }))
		require.NoError(t, err)
		defer later.Close()
		q, ob := s.Queue("jobs"), s.Outbox("hooks")
		jobID, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		msgID, err := ob.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)

		opts := store.WorkOpts{Visibility: time.Hour} // no heartbeat within the test
		wctx, stop := context.WithCancel(c)
		var wg sync.WaitGroup
		var werr, oerr error
		handled := make(chan struct{}, 2)
		wg.Go(func() {
			werr = q.Work(wctx, opts, tel.inst.Handler(func(ctx context.Context, j *store.Job) error {
				defer func() { handled <- struct{}{} }()
				// Another worker, whose clock sees the claim lapsed, takes the job.
				jobs, err := later.Queue("jobs").Claim(ctx, "thief", 1, time.Hour)
				if err != nil || len(jobs) != 1 {
					return store.Permanent(fmt.Errorf("not taken: %v %v", jobs, err))
				}
				return nil
			}))
		})
		wg.Go(func() {
			oerr = ob.Run(wctx, store.OutboxOpts{WorkOpts: opts, MaxAttempts: 1},
				tel.inst.Handler(func(context.Context, *store.Job) error {
					defer func() { handled <- struct{}{} }()
					return errors.New("unreachable")
				}))
		})
		<-handled
		<-handled
		stop() // Work and Run settle (and report) what they ran before they return
		wg.Wait()
		require.NoError(t, werr)
		require.NoError(t, oerr)

		outcomes := map[int64][]string{}
		for _, sp := range tel.spans.Ended() {
			if sp.SpanKind() != trace.SpanKindConsumer {
				continue
			}
			a := attrs(sp)
			var id int64
			_, _ = fmt.Sscan(a[alkotel.KeyMessageID].AsString(), &id)
			outcomes[id] = append(outcomes[id], a[alkotel.KeyOutcome].AsString())
			if id == msgID {
				assert.Equal(t, "Error", sp.Status().Code.String())
			}
			require.Len(t, sp.Links(), 1, "WithProducerLinks")
			assert.Equal(t, sp.Parent().SpanID(), sp.Links()[0].SpanContext.SpanID(), "the link is the producer, the parent")
		}
		assert.Equal(t, map[int64][]string{jobID: {"lost"}, msgID: {"dead"}}, outcomes)

		var rm metricdata.ResourceMetrics
		require.NoError(t, tel.reader.Collect(c, &rm))
		counts := map[string]uint64{}
		for _, m := range metrics(rm) {
			if m.Name == "messaging.process.duration" {
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					v, _ := dp.Attributes.Value(alkotel.KeyOutcome)
					counts[v.AsString()] += dp.Count
				}
			}
		}
		assert.Equal(t, map[string]uint64{"lost": 1, "dead": 1}, counts)
	})
}

// A job its handler settled itself has the outcome of that settle, as the
// client's job events name it: a Retry is "retried", a Snooze "snoozed", a
// Release "released" (not "settled_by_handler" for all three); a job
// deleted under its handler is "lost", as the client says.
func TestOutcomesOfHandlerSettles(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		c := testCtx(t)
		tel := newTelemetry()
		s := open(t, dsn, tel)
		q := s.Queue("jobs")
		ids := map[int64]string{}
		for _, k := range []string{"retry", "snooze", "release", "delete"} {
			id, err := q.Enqueue(c, []byte(k), store.EnqueueOpts{})
			require.NoError(t, err)
			ids[id] = k
		}
		handled := make(chan struct{}, 5)
		released := false // the released job's second run completes it
		wctx, stop := context.WithCancel(c)
		werr := make(chan error, 1)
		go func() {
			werr <- q.Work(wctx, store.WorkOpts{Concurrency: 1}, tel.inst.Handler(func(ctx context.Context, j *store.Job) error {
				defer func() { handled <- struct{}{} }()
				var err error
				switch string(j.Payload) {
				case "retry":
					_, err = j.Retry(ctx, time.Hour, "again")
				case "snooze":
					err = j.Snooze(ctx, time.Hour)
				case "release":
					if !released {
						released = true
						err = j.Release(ctx)
					}
				case "delete":
					ctx = context.WithoutCancel(ctx) // the cancel ends the handler's context
					if err = q.Cancel(ctx, j.ID); err == nil {
						err = q.Delete(ctx, j.ID)
					}
				}
				if err != nil {
					return store.Permanent(err)
				}
				return nil
			}))
		}()
		for range 5 {
			<-handled
		}
		stop() // Work settles (and reports) what it ran before it returns
		require.NoError(t, <-werr)

		outcomes := map[string][]string{}
		for _, sp := range tel.spans.Ended() {
			if sp.SpanKind() != trace.SpanKindConsumer {
				continue
			}
			a := attrs(sp)
			var id int64
			_, _ = fmt.Sscan(a[alkotel.KeyMessageID].AsString(), &id)
			outcomes[ids[id]] = append(outcomes[ids[id]], a[alkotel.KeyOutcome].AsString())
		}
		assert.Equal(t, map[string][]string{"retry": {"retried"}, "snooze": {"snoozed"},
			"release": {"released", "completed"}, "delete": {"lost"}}, outcomes)

		var rm metricdata.ResourceMetrics
		require.NoError(t, tel.reader.Collect(c, &rm))
		counts := map[string]uint64{}
		for _, m := range metrics(rm) {
			if m.Name == "messaging.process.duration" {
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					v, _ := dp.Attributes.Value(alkotel.KeyOutcome)
					counts[v.AsString()] += dp.Count
				}
			}
		}
		assert.Equal(t, map[string]uint64{"retried": 1, "snoozed": 1, "released": 1, "completed": 1, "lost": 1}, counts)
	})
}

// An ack the database refuses is "unsettled", its span marked failed with
// the database's error; the job runs again once its claim lapsed, and that
// run is "completed". The fault is real: a trigger raises on the job's
// DELETE (Work's ack) on its first attempt. Test-only SQL.
func TestUnsettledOutcome(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		c := testCtx(t)
		tel := newTelemetry()
		var ahead atomic.Int64 // moves the store's clock past the claim's lapse
		s, err := store.Open(c, dsn, store.WithInsertMiddleware(tel.inst.InsertMiddleware()),
			store.WithClock(func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		q := s.Queue("jobs")
		id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		stmts := []string{fmt.Sprintf(`CREATE TRIGGER test_fail_ack BEFORE DELETE ON alk_jobs
			WHEN OLD.id = %d AND OLD.attempts = 1 BEGIN SELECT RAISE(ABORT, 'injected ack fault'); END`, id)}
		if filepath.Ext(dsn) != ".db" { // PostgreSQL
			stmts = []string{`CREATE FUNCTION public.test_fail_ack() RETURNS trigger LANGUAGE plpgsql
				AS $$ BEGIN RAISE EXCEPTION 'injected ack fault'; END $$`,
				fmt.Sprintf(`CREATE TRIGGER test_fail_ack BEFORE DELETE ON alkstore.jobs FOR EACH ROW
				WHEN (OLD.id = %d AND OLD.attempts = 1) EXECUTE FUNCTION public.test_fail_ack()`, id)}
		}
		tx, err := s.Begin(c)
		require.NoError(t, err)
		for _, stmt := range stmts {
			_, err := tx.Exec(c, stmt)
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit(c))

		results := make(chan store.JobResult, 2)
		wctx, stop := context.WithCancel(c)
		werr := make(chan error, 1)
		go func() {
			werr <- q.Work(wctx, store.WorkOpts{Visibility: time.Hour, PollInterval: 20 * time.Millisecond},
				tel.inst.Handler(func(ctx context.Context, j *store.Job) error {
					// Registered after alkotel's: its span has ended when this runs.
					j.OnResult(func(res store.JobResult) { results <- res })
					return nil
				}))
		}()
		next := func() store.JobResult {
			select {
			case res := <-results:
				return res
			case <-c.Done():
				t.Fatal("no result")
			}
			return store.JobResult{}
		}
		require.ErrorContains(t, next().SettleErr, "injected ack fault")
		ahead.Store(int64(2 * time.Hour)) // the claim lapsed: the job runs again
		require.NoError(t, next().SettleErr)
		stop()
		require.NoError(t, <-werr)

		var outcomes []string
		for _, sp := range tel.spans.Ended() {
			if sp.SpanKind() != trace.SpanKindConsumer {
				continue
			}
			a := attrs(sp)
			require.Equal(t, fmt.Sprint(id), a[alkotel.KeyMessageID].AsString())
			outcomes = append(outcomes, a[alkotel.KeyOutcome].AsString())
			if a[alkotel.KeyOutcome].AsString() == "unsettled" {
				assert.Equal(t, "Error", sp.Status().Code.String())
				assert.Contains(t, sp.Status().Description, "injected ack fault")
			}
		}
		assert.Equal(t, []string{"unsettled", "completed"}, outcomes)

		var rm metricdata.ResourceMetrics
		require.NoError(t, tel.reader.Collect(c, &rm))
		counts := map[string]uint64{}
		for _, m := range metrics(rm) {
			if m.Name == "messaging.process.duration" {
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					v, _ := dp.Attributes.Value(alkotel.KeyOutcome)
					counts[v.AsString()] += dp.Count
				}
			}
		}
		assert.Equal(t, map[string]uint64{"unsettled": 1, "completed": 1}, counts)
	})
}

// alkstore.job.wake_latency records the jobs that found their worker idle
// (store.Job.WakeLatency), not a backlog.
func TestWakeLatencyMetric(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		c := testCtx(t)
		tel := newTelemetry()
		s := open(t, dsn, tel)
		q := s.Queue("jobs")
		_, err := q.Enqueue(c, []byte("backlog"), store.EnqueueOpts{})
		require.NoError(t, err)
		handled := make(chan struct{}, 2)
		wctx, stop := context.WithCancel(c)
		werr := make(chan error, 1)
		go func() {
			werr <- q.Work(wctx, store.WorkOpts{PollInterval: time.Hour}, tel.inst.Handler(func(context.Context, *store.Job) error {
				handled <- struct{}{}
				return nil
			}))
		}()
		<-handled
		_, err = q.Enqueue(c, []byte("woken"), store.EnqueueOpts{}) // the worker has drained the queue
		require.NoError(t, err)
		<-handled
		stop()
		require.NoError(t, <-werr)

		var rm metricdata.ResourceMetrics
		require.NoError(t, tel.reader.Collect(c, &rm))
		counts := map[string]uint64{}
		for _, m := range metrics(rm) {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				for _, dp := range h.DataPoints {
					counts[m.Name] += dp.Count
				}
			}
		}
		assert.EqualValues(t, 2, counts["alkstore.job.start_delay"])
		assert.EqualValues(t, 1, counts["alkstore.job.wake_latency"], "the woken job only")
	})
}
