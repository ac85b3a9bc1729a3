// Command service is a complete service on one client: it places orders,
// each of which commits, in the order's own transaction, a welcome email (a
// typed queue), a payment (a raw queue whose transactional handler records
// the charge in the same transaction that completes the job) and a webhook
// (the outbox); a schedule mails a digest every second; the janitor keeps
// the tables trim. One client.Client runs all of it, started by one Start.
//
// The first SIGINT (Ctrl-C) or SIGTERM stops it gracefully: no job is
// claimed any more, the handlers in flight finish and their jobs are
// acked, so no job is lost or run twice; the rest wait in the database for
// the next start. A second signal, or 30 seconds, stops it hard: handlers
// are cancelled and their jobs go back to their queues with their attempt.
//
//	go run ./examples/service                     # embedded SQLite in a temp dir, 20 orders
//	go run ./examples/service app.db 500          # place 500 orders, then serve
//	go run ./examples/service postgres://user@host/db 0
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alkstore/alkstore/client"
	"github.com/alkstore/alkstore/examples/internal/example"
	"github.com/alkstore/alkstore/store"
)

func main() { example.Main(run) }

// Mail is the emails queue's job.
type Mail struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	Order   int64  `json:"order,omitempty"`
}

func run(ctx context.Context, dsn string) error {
	// Listen before anything runs: a signal must never kill the process
	// halfway.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	orders := 20
	if len(os.Args) > 2 {
		n, err := strconv.Atoi(os.Args[2])
		if err != nil {
			return fmt.Errorf("orders to place: %w", err)
		}
		orders = n
	}

	s, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		// Your own tables, beside alkstore's: the orders, and what the
		// handlers did (a real service would send mail and call out instead).
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS service_orders (id BIGINT PRIMARY KEY, customer TEXT NOT NULL)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS service_effects (kind TEXT NOT NULL, order_id BIGINT NOT NULL, job_id BIGINT NOT NULL)`)
		return err
	}); err != nil {
		return err
	}

	emails := s.JobQueue[Mail]("service-emails")
	payments := s.Queue("service-payments")
	webhooks := s.Outbox("service-webhooks")
	if err := s.Schedule("service-digest").Set(ctx, store.ScheduleSpec{Spec: "@every 1s", Queue: "service-emails",
		Payload: []byte(`{"to":"ops@example.com","subject":"digest"}`)}); err != nil {
		return err
	}

	// Placing an order commits the order and its three jobs together.
	var last int64
	if err := s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.QueryRow(ctx, `SELECT COALESCE(MAX(id), 0) FROM service_orders`).Scan(&last)
	}); err != nil {
		return err
	}
	for id := last + 1; id <= last+int64(orders); id++ {
		customer := fmt.Sprintf("customer-%d", id)
		err := s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO service_orders (id, customer) VALUES ($1, $2)`, id, customer); err != nil {
				return err
			}
			if _, err := emails.EnqueueTx(ctx, tx, Mail{To: customer, Subject: "welcome", Order: id}, store.EnqueueOpts{}); err != nil {
				return err
			}
			if _, err := payments.EnqueueTx(ctx, tx, []byte(strconv.FormatInt(id, 10)), store.EnqueueOpts{}); err != nil {
				return err
			}
			_, err := webhooks.EnqueueTx(ctx, tx, fmt.Appendf(nil, `{"order":%d}`, id), store.EnqueueOpts{})
			return err
		})
		if err != nil {
			return err
		}
	}
	fmt.Printf("placed %d orders\n", orders)

	// record is a handler's side effect, in the application's table.
	record := func(ctx context.Context, kind string, order int64, job *store.Job) error {
		return s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO service_effects (kind, order_id, job_id) VALUES ($1, $2, $3)`, kind, order, job.ID)
			return err
		})
	}
	// work stands for a call that takes a while (an SMTP server, a PDF).
	work := func(ctx context.Context, d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err() // only a hard stop cancels a handler
		}
	}

	c := client.New(s, client.Opts{
		Middleware: []client.Middleware{logFailures}, // every handler and deliverer
	})
	var mailed, charged, delivered atomic.Int64
	err = c.HandleJobs(emails, store.WorkOpts{Concurrency: 8}, func(ctx context.Context, job *store.Job, m Mail) error {
		if err := work(ctx, 20*time.Millisecond); err != nil {
			return err
		}
		kind := "email"
		if m.Subject == "digest" {
			kind = "digest"
		}
		return record(ctx, kind, m.Order, job)
	}, count(&mailed)) // this queue's own middleware
	if err != nil {
		return err
	}
	// The payment step is transactional: the charge's row and the job's
	// completion commit together, so a crash or a lost claim never leaves a
	// recorded charge whose job runs again.
	err = c.HandleTx(payments, store.WorkOpts{Concurrency: 4}, func(ctx context.Context, tx store.Tx, job *store.Job) error {
		order, err := strconv.ParseInt(string(job.Payload), 10, 64)
		if err != nil {
			return store.Permanent(err) // a malformed job will not get better
		}
		_, err = tx.Exec(ctx, `INSERT INTO service_effects (kind, order_id, job_id) VALUES ('payment', $1, $2)`, order, job.ID)
		return err
	}, count(&charged))
	if err != nil {
		return err
	}
	err = c.HandleOutbox(webhooks, store.OutboxOpts{Concurrency: 4}, func(ctx context.Context, m *store.Job) error {
		var order int64
		if _, err := fmt.Sscanf(string(m.Payload), `{"order":%d}`, &order); err != nil {
			return store.Permanent(err)
		}
		// A real deliverer POSTs m.Payload with m.ID as its idempotency key.
		return record(ctx, "webhook", order, m)
	}, count(&delivered))
	if err != nil {
		return err
	}

	if err := c.Start(ctx); err != nil {
		return err
	}
	fmt.Println("serving; Ctrl-C stops gracefully, a second Ctrl-C stops hard")
	select {
	case <-sigs:
	case <-c.Stopped(): // a loop failed, or the store closed
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() {
		select {
		case <-sigs: // the second signal: stop hard
			cancel()
		case <-stopCtx.Done():
		}
	}()
	err = c.Stop(stopCtx)
	fmt.Printf("stopped: %d mails, %d payments, %d webhooks handled\n", mailed.Load(), charged.Load(), delivered.Load())
	return err
}

// logFailures is client-wide middleware: it logs every failed job with its
// queue, attempt and duration.
func logFailures(next store.Handler) store.Handler {
	return func(ctx context.Context, job *store.Job) error {
		start := time.Now()
		err := next(ctx, job)
		if err != nil {
			slog.Warn("job failed", "queue", job.Queue, "job", job.ID, "attempt", job.Attempts,
				"took", time.Since(start), "error", err)
		}
		return err
	}
}

// count is per-queue middleware: it counts the jobs its handler completed.
func count(n *atomic.Int64) client.Middleware {
	return func(next store.Handler) store.Handler {
		return func(ctx context.Context, job *store.Job) error {
			err := next(ctx, job)
			if err == nil {
				n.Add(1)
			}
			return err
		}
	}
}
