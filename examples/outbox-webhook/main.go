// Command outbox-webhook places orders whose webhook messages commit in the
// same transaction as the order row, then delivers them to an HTTP endpoint
// (a local test server): a declined order's message never exists, a 503 is
// retried with backoff, and a 404 sends the message to dead at once.
//
//	go run ./examples/outbox-webhook            # embedded SQLite
//	go run ./examples/outbox-webhook postgres://user@host/db
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/alkstore/alkstore/examples/internal/example"
	"github.com/alkstore/alkstore/store"
)

func main() { example.Main(run) }

var errDeclined = errors.New("card declined")

func run(ctx context.Context, dsn string) error {
	s, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.Close()
	webhooks := s.Outbox("outbox-webhook")

	// The receiving end: answers 503 to its first call, 404 for unknown
	// customers, 200 otherwise.
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case calls.Add(1) == 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case strings.Contains(string(body), "ghost"):
			w.WriteHeader(http.StatusNotFound)
		default:
			fmt.Printf("  endpoint received %s\n", body)
		}
	}))
	defer srv.Close()

	if err := s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS webhook_orders (id BIGINT PRIMARY KEY, customer TEXT NOT NULL)`)
		return err
	}); err != nil {
		return err
	}
	place := func(id int, customer string, pay error) error {
		return s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO webhook_orders (id, customer) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET customer = excluded.customer`, id, customer); err != nil {
				return err
			}
			msg := fmt.Appendf(nil, `{"order":%d,"customer":%q}`, id, customer)
			if _, err := webhooks.EnqueueTx(ctx, tx, msg, store.EnqueueOpts{}); err != nil {
				return err
			}
			return pay // an error rolls back the order and its message together
		})
	}
	for _, o := range []struct {
		id       int
		customer string
		pay      error
	}{{1, "ada", nil}, {2, "grace", nil}, {3, "mallory", errDeclined}, {4, "ghost", nil}} {
		err := place(o.id, o.customer, o.pay)
		switch {
		case errors.Is(err, errDeclined):
			fmt.Printf("order %d declined: no row, no message\n", o.id)
		case err != nil:
			return err
		default:
			fmt.Printf("order %d placed with its webhook message\n", o.id)
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- webhooks.Run(runCtx, store.OutboxOpts{
			Concurrency: 2,
			MaxAttempts: 5,
			Backoff:     func(attempt int) time.Duration { return time.Duration(attempt) * 100 * time.Millisecond },
		}, func(ctx context.Context, m *store.Job) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, bytes.NewReader(m.Payload))
			if err != nil {
				return err
			}
			req.Header.Set("Idempotency-Key", fmt.Sprint(m.ID)) // delivery is at least once
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusNotFound:
				return store.Permanent(fmt.Errorf("endpoint: %s", resp.Status)) // retrying will not help
			case resp.StatusCode >= 300:
				fmt.Printf("  delivery of message %d failed (%s), attempt %d; will retry\n", m.ID, resp.Status, m.Attempts)
				return fmt.Errorf("endpoint: %s", resp.Status)
			}
			return nil
		})
	}()

	for {
		st, err := webhooks.Stats(ctx)
		if err != nil {
			return err
		}
		if st.Ready+st.Scheduled+st.Running == 0 {
			fmt.Printf("outbox settled: %d dead (the unknown customer's, one per run), %d endpoint calls\n", st.Dead, calls.Load())
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	return <-done
}
