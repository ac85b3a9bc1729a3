// Command email-worker enqueues welcome emails in the same transaction as the
// signup row, then runs a worker that sends them: one flaky send is retried
// with backoff, one bad address fails for good and lands in dead, and the
// rest are acked.
//
//	go run ./examples/email-worker            # embedded SQLite
//	go run ./examples/email-worker postgres://user@host/db
package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/alkstore/alkstore/examples/internal/example"
	"github.com/alkstore/alkstore/store"
)

type welcome struct {
	User  string `json:"user"`
	Email string `json:"email"`
}

func main() { example.Main(run) }

var errBadAddress = errors.New("mailbox does not exist")

func run(ctx context.Context, dsn string) error {
	s, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.Close()
	emails := s.JobQueue[welcome]("email-worker") // a typed view: payloads are JSON-encoded welcome values

	if err := s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS email_worker_users (name TEXT PRIMARY KEY, email TEXT NOT NULL)`)
		return err
	}); err != nil {
		return err
	}
	// Signup: the user row and its welcome email commit together (a second
	// run of this program signs the same users up again).
	for _, u := range []welcome{{"ada", "ada@example.com"}, {"grace", "grace@example.com"}, {"mallory", "nobody@invalid"}} {
		err := s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO email_worker_users (name, email) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET email = excluded.email`, u.User, u.Email); err != nil {
				return err
			}
			_, err := emails.EnqueueTx(ctx, tx, u, store.EnqueueOpts{MaxAttempts: 5})
			return err
		})
		if err != nil {
			return err
		}
	}
	fmt.Println("3 users signed up, 3 welcome emails enqueued")

	var sent atomic.Int64
	var graceTries atomic.Int64
	workCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- emails.Work(workCtx, store.WorkOpts{
			Concurrency: 4,
			Backoff:     func(attempt int) time.Duration { return time.Duration(attempt) * 50 * time.Millisecond },
		}, func(ctx context.Context, job *store.Job, w welcome) error {
			switch {
			case w.Email == "nobody@invalid":
				return store.Permanent(errBadAddress) // no point retrying
			case w.User == "grace" && graceTries.Add(1) < 3:
				fmt.Printf("  sending to %s failed (attempt %d), will retry\n", w.Email, job.Attempts)
				return errors.New("smtp timeout")
			}
			fmt.Printf("  sent welcome to %s (attempt %d)\n", w.Email, job.Attempts)
			sent.Add(1)
			return nil
		})
	}()
	for sent.Load() < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	stop() // Work finishes and acks what it holds before it returns
	if err := <-done; err != nil {
		return err
	}
	st, err := emails.Queue().Stats(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("queue now: %d ready, %d running, %d dead\n", st.Ready, st.Running, st.Dead)
	return nil
}
