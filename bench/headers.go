package main

import (
	"context"
	"fmt"

	"github.com/alkstore/alkstore/store"
)

// benchHeaders measures what headers and insert middleware cost, beside
// the plain figures of the same run ("enqueue, 1 producer", "burn-down of
// N via Work"): an enqueue with two headers (a W3C traceparent and a
// tenant, what tracing adds), an enqueue through an insert middleware that
// sets one header the way alkotel's does, and a burn-down of jobs that
// carry headers (claims read and decode them).
func benchHeaders(ctx context.Context, engine string, s *store.Store, again func(...store.Option) *store.Store) {
	payload := []byte(`{"to":"someone@example.com"}`)
	headers := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme"}
	q := s.Queue("bench-headers")
	if what := "enqueue with 2 headers, 1 producer (jobs/s)"; want(engine, what) {
		plain(engine, what, rate(1, func() error {
			_, err := q.Enqueue(ctx, payload, store.EnqueueOpts{Headers: headers})
			return err
		}))
	}
	// The middleware needs a store of its own: beside it, the same figure
	// on a second store without one (a second store's enqueues wake the
	// first store's listeners too, which costs the 1-producer figure).
	if what := "enqueue on a 2nd store, 1 producer (jobs/s)"; want(engine, what) {
		other := again()
		oq := other.Queue("bench-headers")
		plain(engine, what, rate(1, func() error { _, err := oq.Enqueue(ctx, payload, store.EnqueueOpts{}); return err }))
		must0(other.Close())
	}
	if what := "enqueue via insert middleware, 1 producer (jobs/s)"; want(engine, what) {
		mw := again(store.WithInsertMiddleware(func(next store.InsertFunc) store.InsertFunc {
			return func(ctx context.Context, in *store.Insert) error {
				for i := range in.Messages {
					in.Messages[i].SetHeader("traceparent", headers["traceparent"])
				}
				return next(ctx, in)
			}
		}))
		mq := mw.Queue("bench-headers")
		plain(engine, what, rate(1, func() error { _, err := mq.Enqueue(ctx, payload, store.EnqueueOpts{}); return err }))
		must0(mw.Close())
	}
	if what := fmt.Sprintf("burn-down of %d with 2 headers via Work (jobs/s)", *burnN); want(engine, what) {
		jobs := make([]store.NewJob, 1000)
		for i := range jobs {
			jobs[i] = store.NewJob{Payload: payload, Opts: store.EnqueueOpts{Headers: headers}}
		}
		burn := s.Queue("burndown-headers")
		for i := 0; i < *burnN; i += len(jobs) {
			must(burn.EnqueueMany(ctx, jobs[:min(len(jobs), *burnN-i)]))
		}
		plain(engine, what, burnDown(ctx, burn, *burnN, false, *workers))
	}
}
