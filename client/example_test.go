package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"

	"github.com/alkstore/alkstore/client"
	"github.com/alkstore/alkstore/store"
)

func must[T any](v T, err error) T {
	check(err)
	return v
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

type Welcome struct{ User string }

// One client runs a typed queue, a raw one and an outbox, plus the
// scheduler and the janitor; Stop lets the jobs in flight finish.
func Example() {
	dir := must(os.MkdirTemp("", "alkstore-example-"))
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s := must(store.Open(ctx, filepath.Join(dir, "app.db")))
	defer s.Close()
	emails := s.JobQueue[Welcome]("emails")
	invoices := s.Queue("invoices")
	webhooks := s.Outbox("order-webhooks")
	check(s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_ = must(emails.EnqueueTx(ctx, tx, Welcome{User: "ada"}, store.EnqueueOpts{}))
		_ = must(invoices.EnqueueTx(ctx, tx, []byte("order 1"), store.EnqueueOpts{}))
		_, err := webhooks.EnqueueTx(ctx, tx, []byte(`{"order":1}`), store.EnqueueOpts{})
		return err
	}))
	var wg sync.WaitGroup
	wg.Add(3)
	var mu sync.Mutex
	var seen []string
	logJobs := func(next store.Handler) store.Handler { // middleware: logging, metrics, tracing, panics
		return func(ctx context.Context, job *store.Job) error {
			err := next(ctx, job)
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s: %v", job.Queue, err))
			mu.Unlock()
			wg.Done()
			return err
		}
	}
	sendWelcome := func(ctx context.Context, job *store.Job, w Welcome) error { return nil }
	invoice := func(ctx context.Context, job *store.Job) error { return nil }
	post := func(ctx context.Context, m *store.Job) error { return nil }

	c := client.New(s, client.Opts{Middleware: []client.Middleware{logJobs}}) // also runs the scheduler and the janitor
	check(c.HandleJobs(emails, store.WorkOpts{Concurrency: 8}, sendWelcome))
	check(c.Handle(invoices, store.WorkOpts{}, invoice))
	check(c.HandleOutbox(webhooks, store.OutboxOpts{}, post))
	check(c.Start(ctx))
	wg.Wait()          // a service waits for SIGINT here
	check(c.Stop(ctx)) // stops claiming, lets handlers finish; hard once ctx ends

	fmt.Println(len(seen), must(emails.Queue().Stats(ctx)).Running)
	// Output: 3 0
}
