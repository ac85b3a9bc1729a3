package alktest_test

// A runnable example of the helpers on a temporary SQLite file; README.md's
// "Testing" block is a piece of it (tests/readme_test.go keeps them equal).

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"testing"

	"github.com/alkstore/alkstore/alktest"
	"github.com/alkstore/alkstore/store"
)

type Welcome struct{ User string }

// exampleT stands for the *testing.T of a real test.
type exampleT struct{ testing.TB }

func (exampleT) Helper()                      {}
func (exampleT) Fatalf(f string, args ...any) { log.Fatalf(f, args...) }

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func sendWelcome(w Welcome) error { return nil }

func Example() {
	dir, err := os.MkdirTemp("", "alktest-example-")
	check(err)
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, err := store.Open(ctx, filepath.Join(dir, "app.db"))
	check(err)
	defer s.Close()
	var t testing.TB = exampleT{}

	emails := s.JobQueue[Welcome]("emails")
	check(s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := emails.EnqueueTx(ctx, tx, Welcome{User: "ada"}, store.EnqueueOpts{}) // the code under test
		alktest.RequireEnqueuedTx(ctx, t, tx, emails, alktest.Payload(Welcome{User: "ada"}))
		return err
	}))
	job := alktest.RequireEnqueued(ctx, t, emails, alktest.Payload(Welcome{User: "ada"})) // committed
	alktest.RequireNotEnqueued(ctx, t, emails, func(job *store.Job, w Welcome) bool { return w.User == "bob" })

	// One job through the handler, no worker loop: its error and how Work would settle it.
	res := alktest.Work(ctx, t, s.JobQueue[Welcome]("welcome-test"), Welcome{User: "grace"}, store.EnqueueOpts{},
		func(ctx context.Context, job *store.Job, w Welcome) error { return sendWelcome(w) })
	fmt.Println(job.State, res.Err, res.Outcome)
	// Output: pending <nil> acked
}
