package alktest_test

// A runnable example of the helpers; README.md's "Testing with alktest"
// block is a piece of it (tests/readme_test.go keeps them equal).

import (
	"context"
	"fmt"
	"log"
	"os"
	"slices"
	"testing"

	"github.com/alkstore/alkstore/alktest"
	"github.com/alkstore/alkstore/store"
)

type Welcome struct{ User string }

// exampleT stands for the *testing.T of a real test: Fatalf ends the
// example, Cleanup runs at done.
type exampleT struct {
	testing.TB
	cleanups []func()
}

func (*exampleT) Helper()                      {}
func (*exampleT) Fatalf(f string, args ...any) { log.Fatalf(f, args...) }
func (t *exampleT) Cleanup(f func())           { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) TempDir() string {
	dir, err := os.MkdirTemp("", "alktest-example-")
	check(err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
func (t *exampleT) done() {
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func sendWelcome(w Welcome) error { return nil }

func Example() {
	et := &exampleT{}
	defer et.done()
	var t testing.TB = et
	ctx := context.Background()

	s := alktest.NewStore(t, "") // a SQLite file of this test's own; a Postgres DSN gives a fresh database, dropped at cleanup
	emails := s.JobQueue[Welcome]("emails")
	check(s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := emails.EnqueueTx(ctx, tx, Welcome{User: "ada"}, store.EnqueueOpts{}) // the code under test
		alktest.RequireEnqueuedTx(ctx, t, tx, emails, alktest.Payload(Welcome{User: "ada"}))
		return err
	}))
	job := alktest.RequireEnqueued(ctx, t, emails, alktest.Payload(Welcome{User: "ada"})) // committed
	alktest.RequireNotEnqueued(ctx, t, emails, func(job *store.Job, w Welcome) bool { return w.User == "bob" })

	// That very job through the handler, whatever else the queue holds: its error and how it was settled.
	res := alktest.WorkJob(ctx, t, emails, job.ID, func(ctx context.Context, job *store.Job, w Welcome) error {
		return sendWelcome(w)
	})
	fmt.Println(job.State, res.Err, res.Outcome) // pending <nil> acked

	// A transactional handler inside the test's transaction: rolling it back
	// undoes the job, its settle and what the handler wrote. No cleanup.
	audit := s.JobQueue[Welcome]("audit")
	tx, err := s.Begin(ctx)
	check(err)
	res = alktest.WorkTx(ctx, t, tx, emails, Welcome{User: "grace"}, store.EnqueueOpts{},
		func(ctx context.Context, tx store.Tx, job *store.Job, w Welcome) error {
			_, err := audit.EnqueueTx(ctx, tx, w, store.EnqueueOpts{})
			return err
		})
	alktest.RequireEnqueuedTx(ctx, t, tx, audit, alktest.Payload(Welcome{User: "grace"}))
	check(tx.Rollback(ctx))
	alktest.RequireNotEnqueued(ctx, t, audit, nil)
	fmt.Println(res.Outcome)
	// Output:
	// pending <nil> acked
	// acked
}
