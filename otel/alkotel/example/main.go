// Command example shows one trace crossing alkstore: an HTTP request's
// handler places an order, which enqueues a job and publishes an event in
// one transaction; a worker handles the job and a stream consumer the
// event, each in a span continuing the request's trace. It prints that
// trace as a tree, then serves the metrics on a Prometheus endpoint
// (loopback only) and prints what a scrape of it shows of alkstore.
//
//	go run ./example                       # embedded SQLite in a temp dir
//	go run ./example postgres://user@host/db
//
// In a real service, give the tracer provider an OTLP exporter instead of
// the in-memory recorder, and let Prometheus scrape the endpoint.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/alkstore/alkstore/client"
	"github.com/alkstore/alkstore/otel/alkotel"
	"github.com/alkstore/alkstore/store"
)

func main() {
	log.SetFlags(0)
	dsn := ""
	if len(os.Args) > 1 {
		dsn = os.Args[1]
	} else {
		dir, err := os.MkdirTemp("", "alkotel-example-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		dsn = filepath.Join(dir, "app.db")
	}
	if err := run(context.Background(), dsn, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// Order is the event and the job's payload.
type Order struct {
	ID       int64  `json:"id"`
	Customer string `json:"customer"`
}

func run(ctx context.Context, dsn string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	// Traces: recorded in memory here (swap in an OTLP exporter).
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	// Metrics: the Prometheus exporter, on a registry of our own.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { _ = mp.Shutdown(context.Background()) }()

	inst := alkotel.New(alkotel.WithTracerProvider(tp), alkotel.WithMeterProvider(mp))
	s, err := store.Open(ctx, dsn, store.WithInsertMiddleware(inst.InsertMiddleware()))
	if err != nil {
		return err
	}
	defer s.Close()
	observed, err := inst.ObserveStore(s)
	if err != nil {
		return err
	}
	defer func() { _ = observed.Unregister() }()

	emails, orders := s.JobQueue[Order]("emails"), s.Topic[Order]("orders")

	// The worker and the consumer.
	handled := make(chan string, 2)
	c := client.New(s, client.Opts{Middleware: []client.Middleware{inst.Middleware()}, NoScheduler: true, NoJanitor: true})
	if err := c.HandleJobs(emails, store.WorkOpts{}, func(ctx context.Context, job *store.Job, o Order) error {
		_, span := tp.Tracer("example").Start(ctx, "smtp send")
		span.End()
		handled <- fmt.Sprintf("mailed order %d to %s", o.ID, o.Customer)
		return nil
	}); err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	r, err := orders.Stream().Subscribe(ctx, "billing", store.SubscribeOpts{})
	if err != nil {
		return err
	}
	go func() {
		ev, err := r.Recv(ctx)
		if err != nil {
			return
		}
		// Say it is handled once ProcessEvent returns, when its span has
		// ended, so the trace printed below holds it.
		if err := inst.ProcessEvent(ctx, "billing", ev, func(ctx context.Context) error { return nil }); err == nil {
			handled <- fmt.Sprintf("billed event %d", ev.Offset)
		}
	}()

	// The request: its handler's span is the trace's root.
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx, span := tp.Tracer("example").Start(req.Context(), req.Method+" "+req.URL.Path,
			trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		o := Order{ID: 42, Customer: "ada@example.com"}
		err := s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if _, err := emails.EnqueueTx(ctx, tx, o, store.EnqueueOpts{}); err != nil {
				return err
			}
			_, err := orders.PublishTx(ctx, tx, &o, store.PublishOpts{Key: fmt.Sprint(o.ID)})
			return err
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders", nil))
	if rec.Code != http.StatusCreated {
		return fmt.Errorf("POST /orders: %d %s", rec.Code, rec.Body)
	}
	for range 2 {
		select {
		case msg := <-handled:
			fmt.Fprintln(out, msg)
		case <-ctx.Done():
			return errors.New("the job or the event was not handled in time")
		}
	}
	_ = r.Close()
	if err := c.Stop(ctx); err != nil {
		return err
	}

	fmt.Fprintln(out, "\none trace:")
	printTree(out, spans.Ended())

	// Metrics: serve them on loopback and scrape once, as Prometheus would.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nhttp://%s/metrics (alkstore and messaging lines):\n", ln.Addr())
	for _, line := range strings.Split(string(body), "\n") {
		if (strings.HasPrefix(line, "alkstore_") || strings.HasPrefix(line, "messaging_")) && !strings.Contains(line, "_bucket{") {
			fmt.Fprintln(out, line)
		}
	}
	return nil
}

// printTree prints spans as a tree by parent, children in start order.
func printTree(out io.Writer, spans []sdktrace.ReadOnlySpan) {
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	ids := map[trace.SpanID]bool{}
	for _, sp := range spans {
		ids[sp.SpanContext().SpanID()] = true
	}
	var roots []sdktrace.ReadOnlySpan
	for _, sp := range spans {
		if p := sp.Parent().SpanID(); p.IsValid() && ids[p] {
			children[p] = append(children[p], sp)
		} else {
			roots = append(roots, sp)
		}
	}
	var walk func(sp sdktrace.ReadOnlySpan, depth int)
	walk = func(sp sdktrace.ReadOnlySpan, depth int) {
		fmt.Fprintf(out, "%s%s [%s] trace %s\n", strings.Repeat("  ", depth), sp.Name(), sp.SpanKind(), sp.SpanContext().TraceID())
		kids := children[sp.SpanContext().SpanID()]
		slices.SortFunc(kids, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, sp := range roots {
		walk(sp, 0)
	}
}
