package store_test

// Runnable examples of the main entry points. Each runs on a SQLite file in
// a temporary directory, so `go test` runs them anywhere, and checks its
// output. README.md's code blocks are pieces of these functions
// (tests/readme_test.go keeps them equal).
//
// must and check stand for the error handling of a real program: they stop
// at the first error.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/alkstore/alkstore/examples/sqlc-shared-tx/applite"
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

// tempDB returns a SQLite file in a fresh temporary directory and a func
// that removes the directory.
func tempDB() (path string, cleanup func()) {
	dir, err := os.MkdirTemp("", "alkstore-example-")
	check(err)
	return filepath.Join(dir, "app.db"), func() { os.RemoveAll(dir) }
}

// openTemp opens a store on a temporary SQLite file; done closes it and
// removes the file.
func openTemp(opts ...store.Option) (s *store.Store, done func()) {
	path, cleanup := tempDB()
	s = must(store.Open(context.Background(), path, opts...))
	return s, func() { s.Close(); cleanup() }
}

func ExampleOpen() {
	path, cleanup := tempDB() // a SQLite file in a temporary directory
	defer cleanup()
	ctx := context.Background()

	s, err := store.Open(ctx, path) // or "postgres://user@host/db"; the schema is migrated on open
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	fmt.Println(s.Engine())
	// Output: lite
}

// An order row and its event commit together, or roll back together.
func ExampleStore_InTx() {
	s, done := openTemp()
	defer done()
	ctx := context.Background()
	check(s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE shop_orders (id bigint PRIMARY KEY, item text NOT NULL)`)
		return err
	}))
	orders := s.Stream("orders")
	checkout := func(id int64, item string, pay error) error {
		return s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO shop_orders (id, item) VALUES ($1, $2)`, id, item); err != nil {
				return err
			}
			if _, err := orders.PublishWithKeyTx(ctx, tx, fmt.Sprint(id), []byte("order placed: "+item)); err != nil {
				return err
			}
			return pay // nil commits both; an error, a panic or a cancelled ctx rolls both back
		})
	}

	fmt.Println(checkout(1, "teapot", nil))
	fmt.Println(checkout(2, "kettle", errors.New("payment declined")))

	for _, ev := range must(orders.ReadSince(ctx, 0, 100)) {
		fmt.Println(*ev.Key, string(ev.Payload))
	}
	// Output:
	// <nil>
	// payment declined
	// 1 order placed: teapot
}

// Begin and Commit, and the application's own sqlc-generated queries
// (applite, from examples/sqlc-shared-tx) on the driver transaction under a
// store-begun Tx. On PostgreSQL the same reads tx.Pgx() and apppg.New(ptx).
func ExampleStore_Begin() {
	s, done := openTemp()
	defer done()
	ctx := context.Background()
	check(s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE sqlc_orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)`)
		return err
	}))
	orders := s.Stream("orders")
	item, body := "teapot", []byte("order placed")

	tx, err := s.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)                             // a no-op after Commit
	stx, _ := tx.SQL()                                 // or ptx, _ := tx.Pgx() on PostgreSQL
	id, err := applite.New(stx).CreateOrder(ctx, item) // your sqlc queries
	if err != nil {
		log.Fatal(err)
	}
	if _, err := orders.PublishWithKeyTx(ctx, tx, fmt.Sprint(id), body); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil { // the store-begun tx ends through tx
		log.Fatal(err)
	}

	evs := must(orders.ReadSince(ctx, 0, 10))
	fmt.Println(*evs[0].Key, string(evs[0].Payload))
	// Output: 1 order placed
}

// The application begins the transaction with its own database/sql handle
// on the same SQLite file and the store adopts it; the application ends it.
// On PostgreSQL the same reads pool.Begin, s.AdoptPgx and apppg.New(ptx).
func ExampleStore_AdoptSQL() {
	path, cleanup := tempDB()
	defer cleanup()
	ctx := context.Background()
	s := must(store.Open(ctx, path))
	defer s.Close()
	db := must(sql.Open("sqlite3", "file:"+path+"?_pragma=busy_timeout(10000)")) // the driver the store registers
	defer db.Close()
	_ = must(db.ExecContext(ctx, `CREATE TABLE sqlc_orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)`))
	orders := s.Stream("orders")
	item, body := "teapot", []byte("order placed")

	stx, err := db.BeginTx(ctx, nil) // you begin it
	if err != nil {
		log.Fatal(err)
	}
	defer stx.Rollback()
	tx, err := s.AdoptSQL(stx) // nil, a PostgreSQL store or a closed one: an error here
	if err != nil {
		log.Fatal(err)
	}
	id, err := applite.New(stx).CreateOrder(ctx, item)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := orders.PublishWithKeyTx(ctx, tx, fmt.Sprint(id), body); err != nil {
		log.Fatal(err)
	}
	if err := stx.Commit(); err != nil { // you end it: tx.Commit and tx.Rollback refuse
		log.Fatal(err)
	}

	evs := must(orders.ReadSince(ctx, 0, 10))
	fmt.Println(*evs[0].Key, string(evs[0].Payload))
	// Output: 1 order placed
}

func ExampleStream() {
	s, done := openTemp()
	defer done()
	ctx := context.Background()
	user := "user-1"

	st := s.Stream("events")                                    // no I/O; bad names fail on use
	off := must(st.Publish(ctx, []byte("hello")))               // returns the assigned offset
	off = must(st.PublishWithKey(ctx, "user-1", []byte("ada"))) // keyed
	msgs := []store.Message{{Payload: []byte("a")}, {Key: &user, Payload: []byte("b")}}
	offs := must(st.PublishMany(ctx, msgs))            // all or nothing: one statement on PostgreSQL, one transaction on SQLite
	evs := must(st.ReadSince(ctx, off, 100))           // offset ASC, after off; limit <= 0 → empty, no I/O
	evs = must(st.ReadFromConsumer(ctx, "mailer", 2))  // after the consumer's saved offset
	check(st.SaveOffset(ctx, "mailer", evs[1].Offset)) // monotone: a lower save is a no-op
	saved := must(st.Offset(ctx, "mailer"))            // 0 for an unknown consumer
	n := must(st.TrimTo(ctx, saved))                   // deletes offset <= saved; never renumbers

	fmt.Println(off, offs, len(evs), saved, n)
	// Output: 2 [3 4] 2 2 2
}

func ExampleStream_PublishMessage() {
	s, done := openTemp()
	defer done()
	ctx := context.Background()
	st, q := s.Stream("events"), s.Queue("emails")

	h := map[string]string{"tenant": "acme"}
	_ = must(st.PublishMessage(ctx, store.Message{Payload: []byte("x"), Headers: h})) // Key too: keyed
	_ = must(st.PublishMany(ctx, []store.Message{{Payload: []byte("y"), Headers: h}}))
	_ = must(q.Enqueue(ctx, []byte("z"), store.EnqueueOpts{Headers: h})) // EnqueueMany, Tx, typed, outbox alike
	// ScheduleSpec.Headers and PublishOpts.Headers (typed topics) too; Event.Headers, Job.Headers on read

	evs := must(st.ReadSince(ctx, 0, 10))
	jobs := must(q.Claim(ctx, "w", 1, time.Minute))
	fmt.Println(evs[0].Headers["tenant"], evs[1].Headers["tenant"], jobs[0].Headers["tenant"])
	// Output: acme acme acme
}

type Counter struct{ N int }

// A compacted counter: the head of a key, locked, read and replaced in one
// transaction, so concurrent increments never lose one.
func ExampleTopic() {
	s, done := openTemp()
	defer done()
	ctx := context.Background()

	counters := s.Topic[Counter]("counters") // typed view of a stream (generic method)
	check(counters.Stream().Configure(ctx, store.StreamConfig{Compacted: true, MinCompactionLag: time.Minute}))
	visits := counters.Key("page-visits")

	increment := func(ctx context.Context, tx store.Tx) error {
		cur, err := visits.LockCompactionHeadTx(ctx, tx) // locks the key until tx ends; nil: no value yet
		if err != nil {
			return err
		}
		next := Counter{N: 1}
		if cur != nil {
			next.N = cur.N + 1
		}
		_, err = counters.PublishTx(ctx, tx, &next, store.PublishOpts{Key: "page-visits"})
		return err
	}
	check(s.InTx(ctx, increment))
	check(s.InTx(ctx, increment))

	v := must(visits.CompactionHead(ctx))                                       // plain read; ErrNotFound without a value
	kvs := must(counters.Heads(ctx, "", 100))                                   // the key/value view, in key order (byte order)
	_ = must(counters.Publish(ctx, nil, store.PublishOpts{Key: "page-visits"})) // a tombstone deletes the key

	fmt.Println(v.N, len(kvs), kvs[0].Key, kvs[0].Value.N)
	_, err := visits.CompactionHead(ctx)
	fmt.Println(errors.Is(err, store.ErrNotFound))
	// Output:
	// 2 1 page-visits 2
	// true
}

func ExampleStream_Subscribe() {
	s, done := openTemp()
	defer done()
	ctx := context.Background()
	for _, p := range []string{"1.00", "1.01", "0.99"} {
		_ = must(s.Stream("prices").Publish(ctx, []byte(p)))
	}

	rx := must(s.Stream("prices").Subscribe(ctx, "ticker", store.SubscribeOpts{Buffer: 16, AutoSaveEvery: 100}))
	defer rx.Close()
	ev := must(rx.Recv(ctx))  // waits; replays from the saved offset, then follows live events
	check(rx.SaveOffset(ctx)) // saves Position(): the last event Recv returned, never more
	fmt.Println(string(ev.Payload), rx.Position())

	for range 2 {
		ev = must(rx.Recv(ctx))
		fmt.Println(string(ev.Payload))
	}
	_, ok, err := rx.TryRecv(ctx) // ok == false: nothing ready
	fmt.Println(ok, err)
	// Output:
	// 1.00 1
	// 1.01
	// 0.99
	// false <nil>
}

func ExampleStore_Listen() {
	s, done := openTemp()
	defer done()
	ctx := context.Background()

	l := must(s.Listen(ctx, "alerts")) // from now on; no history
	defer l.Close()
	check(s.Notify(ctx, "alerts", []byte("disk full"))) // or s.NotifyTx(ctx, tx, ...): sent only if tx commits
	n := must(l.Recv(ctx))
	fmt.Println(n.Channel, string(n.Payload))
	// Output: alerts disk full
}

func ExampleQueue() {
	s, done := openTemp()
	defer done()
	ctx := context.Background()

	q := s.Queue("emails") // no I/O
	id := must(q.Enqueue(ctx, []byte("to ada"), store.EnqueueOpts{Priority: 5, MaxAttempts: 10}))
	_ = must(q.Enqueue(ctx, []byte("to grace"), store.EnqueueOpts{Delay: time.Minute})) // claimable in a minute
	batch := []store.NewJob{{Payload: []byte("to linus")}, {Payload: []byte("to ken")}}
	ids := must(q.EnqueueMany(ctx, batch)) // all or nothing: one statement on PostgreSQL, one transaction on SQLite; at most MaxBatchSize (240 MiB)

	jobs := must(q.Claim(ctx, "worker-1", 50, 30*time.Second))     // priority DESC, run_at, id
	check(jobs[0].Heartbeat(ctx, time.Minute))                     // the claim now runs out a minute from now
	check(jobs[0].Ack(ctx))                                        // done: deleted (or kept: QueueConfig)
	ok := must(jobs[1].Retry(ctx, 10*time.Second, "smtp timeout")) // false: attempts spent, now dead
	check(jobs[2].Fail(ctx, "bad address"))                        // dead at once
	job := must(q.Job(ctx, ids[1]))                                // live or finished; ErrNotFound otherwise
	fmt.Println(id, len(jobs), string(jobs[0].Payload), ok, job.State, job.LastError)

	check(q.Requeue(ctx, ids[1]))                          // a dead (cancelled, expired) job back to pending
	n := must(q.SweepExpired(ctx))                         // jobs past ExpiresAt not held by a live claim → expired
	jobs = must(q.Claim(ctx, "worker-1", 50, time.Minute)) // the requeued job
	acked := must(q.AckMany(ctx, jobs))                    // only rows still held by each claim
	st := must(q.Stats(ctx))                               // counts by state
	fmt.Println(n, acked)
	fmt.Printf("ready %d, scheduled %d, running %d, dead %d\n", st.Ready, st.Scheduled, st.Running, st.Dead)
	// Output:
	// 1 3 to ada true dead bad address
	// 0 1
	// ready 0, scheduled 2, running 0, dead 0
}

func ExampleQueue_Jobs() {
	s, done := openTemp()
	defer done()
	ctx := context.Background()

	q := s.Queue("reports")
	check(q.Configure(ctx, store.QueueConfig{
		CompletedRetention: 24 * time.Hour,      // keep acked jobs a day (default 0: deleted when acked)
		DeadRetention:      30 * 24 * time.Hour, // dead, cancelled, expired: 30 days (default 0: until deleted)
	}))
	ids := must(q.EnqueueMany(ctx, []store.NewJob{{}, {}, {}}))
	jobs := must(q.Claim(ctx, "worker-1", 3, time.Minute))
	check(jobs[0].Ack(ctx))                    // completed, kept a day
	_ = must(jobs[1].Retry(ctx, 0, "timeout")) // pending again; the error is kept
	check(jobs[2].Fail(ctx, "bad input"))      // dead
	retried := must(q.Job(ctx, ids[1]))
	fmt.Println(retried.Errors[0].Attempt, retried.Errors[0].Error) // every attempt's error (the last 20)

	page := must(q.Jobs(ctx, store.JobsOpts{State: store.JobCompleted, Limit: 100})) // in ID order
	next := must(q.Jobs(ctx, store.JobsOpts{State: store.JobCompleted, After: page[len(page)-1].ID, Limit: 100}))
	fmt.Println(len(page), len(next), page[0].State)

	check(q.Delete(ctx, ids[0]))      // any job but a running one
	moved := must(q.RequeueDead(ctx)) // every dead job back to pending, in batches
	for _, qi := range must(s.Queues(ctx)) {
		fmt.Println(qi.Name, qi.Paused, qi.Config.CompletedRetention, qi.Stats.Ready, moved)
	}
	orders := s.Stream("orders")
	check(orders.SaveOffset(ctx, "billing", must(orders.Publish(ctx, []byte("o")))))
	check(orders.ResetOffset(ctx, "billing", 0)) // replay from the start (SaveOffset only moves forward)
	// Output:
	// 1 timeout
	// 1 0 completed
	// reports false 24h0m0s 2 1
}

func ExampleQueue_Work() {
	s, done := openTemp()
	defer done()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	q := s.Queue("emails")
	for _, to := range []string{"ada", "grace", "linus"} {
		_ = must(q.Enqueue(ctx, []byte(to), store.EnqueueOpts{}))
	}
	var mu sync.Mutex
	var sent []string
	send := func(payload []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if sent = append(sent, string(payload)); len(sent) == 3 {
			stop() // Work finishes and settles what it holds, then returns nil
		}
		return nil
	}

	err := q.Work(ctx, store.WorkOpts{Concurrency: 50}, func(ctx context.Context, job *store.Job) error {
		return send(job.Payload) // nil acks; an error retries with backoff; store.Permanent(err) fails at once
	})

	slices.Sort(sent)
	fmt.Println(err, sent, must(q.Stats(context.Background())).Ready)
	// Output: <nil> [ada grace linus] 0
}

func ExampleQueue_WorkTx() {
	s, done := openTemp()
	defer done()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	check(s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE payments (order_id TEXT PRIMARY KEY)`)
		return err
	}))
	q := s.Queue("payments")
	_ = must(q.Enqueue(ctx, []byte("order-7"), store.EnqueueOpts{}))

	err := q.WorkTx(ctx, store.WorkOpts{}, func(ctx context.Context, tx store.Tx, job *store.Job) error {
		defer stop()
		_, err := tx.Exec(ctx, `INSERT INTO payments (order_id) VALUES ($1)`, string(job.Payload))
		return err // nil: the payment and the job's completion commit together (River's JobCompleteTx)
	})

	var paid int
	check(s.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return tx.QueryRow(ctx, `SELECT COUNT(*) FROM payments`).Scan(&paid)
	}))
	fmt.Println(err, paid, must(q.Stats(context.Background())).Ready)
	// Output: <nil> 1 0
}

func ExampleQueue_Pause() {
	s, done := openTemp()
	defer done()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	q := s.Queue("reports")
	_ = must(q.Enqueue(ctx, []byte("monthly"), store.EnqueueOpts{}))
	var attempts []int
	busy := func(job *store.Job) bool { // busy the first time only
		attempts = append(attempts, job.Attempts)
		return job.RunAt.Equal(job.CreatedAt)
	}
	render := func(context.Context, *store.Job) error { stop(); return nil }

	check(q.Pause(ctx))                 // no claims from the queue, in any process, until Resume
	paused := must(q.Stats(ctx)).Paused // true
	check(q.Resume(ctx))                // workers claim again at once (a wake)

	err := q.Work(ctx, store.WorkOpts{Concurrency: 1, Visibility: time.Minute}, func(ctx context.Context, job *store.Job) error {
		if busy(job) {
			return store.Snooze(10 * time.Millisecond) // again later; the attempt is given back
		}
		return render(ctx, job) // may outrun Visibility (Work heartbeats the claim); ctx ends if the job is cancelled
	})

	fmt.Println(paused, err, attempts)
	// Output: true <nil> [1 1]
}

type Welcome struct{ User string }

func ExampleJobQueue() {
	s, done := openTemp()
	defer done()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	emails := s.JobQueue[Welcome]("emails") // typed view (generic method), store codec (JSON)
	check(s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := emails.EnqueueTx(ctx, tx, Welcome{User: "ada"}, store.EnqueueOpts{}) // exists only if tx commits
		return err
	}))
	err := emails.Work(ctx, store.WorkOpts{}, func(ctx context.Context, job *store.Job, w Welcome) error {
		fmt.Println("welcome,", w.User)
		stop()
		return nil
	})
	fmt.Println(err)
	// Output:
	// welcome, ada
	// <nil>
}

func ExampleQueue_EnqueueUnique() {
	s, done := openTemp()
	defer done()
	ctx := context.Background()
	q := s.Queue("emails")

	once := store.EnqueueOpts{Unique: store.UniqueOpts{Key: "welcome:ada"}} // one live job per key in the queue
	first := must(q.EnqueueUnique(ctx, []byte("to ada"), once))
	again := must(q.EnqueueUnique(ctx, []byte("to ada"), once)) // nothing added: Duplicate, and the holder's ID
	id := must(q.Enqueue(ctx, []byte("to ada"), once))          // Enqueue too: no error, the holder's id
	fmt.Println(first.Duplicate, again.Duplicate, again.ID == first.ID, id == first.ID)

	daily := store.UniqueOpts{Key: "digest", ByPeriod: 24 * time.Hour} // one per day of the store's clock
	kept := store.UniqueOpts{Key: "import:42", ByState: []store.JobState{store.JobPending, store.JobRunning, store.JobDead}}
	res := must(q.EnqueueManyUnique(ctx, []store.NewJob{
		{Payload: []byte("digest"), Opts: store.EnqueueOpts{Unique: daily}},
		{Payload: []byte("import 42"), Opts: store.EnqueueOpts{Unique: kept}}, // a dead job keeps its key
		{Payload: []byte("digest, again"), Opts: store.EnqueueOpts{Unique: daily}},
	}))
	fmt.Println(res[0].Duplicate, res[1].Duplicate, res[2].Duplicate, res[2].ID == res[0].ID)
	// Output:
	// false true true true
	// false false true true
}

// A schedule fires into a queue; a scheduler (one leader among all that run)
// fires it. The example moves the store's clock instead of waiting.
func ExampleScheduler() {
	now := time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, done := openTemp(store.WithClock(clock))
	defer done()
	ctx := context.Background()

	nightly := s.Schedule("nightly-report") // a handle: no I/O
	err := nightly.Set(ctx, store.ScheduleSpec{
		Spec: "30 2 * * *", TZ: "America/New_York",
		Queue: "reports", Payload: []byte(`{"kind":"daily"}`), Priority: 5, MaxAttempts: 3,
	}) // registers, or replaces the one with that name
	check(err)
	check(nightly.Pause(ctx))      // no fires until resumed
	check(nightly.Resume(ctx))     // from the next boundary after now
	list := must(s.Schedules(ctx)) // name, spec, TZ, queue, next fire, paused, last fire
	fmt.Println(list[0].Name, list[0].NextFireAt.In(time.UTC))
	mu.Lock()
	now = now.Add(24 * time.Hour) // a day later
	mu.Unlock()

	sch := s.Scheduler("web-1", store.SchedulerOpts{}) // in every process that may lead
	n := must(sch.RunOnce(ctx))                        // fire what is due from your own tick; or sch.Run(ctx): lead or stand by until ctx ends
	lease := must(s.SchedulerLeader(ctx))              // who leads (Owner "" for nobody)

	jobs := must(s.Queue("reports").Claim(ctx, "w", 10, time.Minute))
	fmt.Println(n, lease.Owner == "", len(jobs), jobs[0].RunAt.In(time.UTC), string(jobs[0].Payload))
	check(nightly.Delete(ctx)) // ErrNotFound when there is none
	// Output:
	// nightly-report 2026-03-01 07:30:00 +0000 UTC
	// 1 true 1 2026-03-01 07:30:00 +0000 UTC {"kind":"daily"}
}

// Webhooks for orders: a message exists exactly when its order commits, and
// Run delivers it at least once.
func ExampleOutbox() {
	s, done := openTemp()
	defer done()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	check(s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL)`)
		return err
	}))
	id, who, body := 7, "ada", []byte(`{"order":7}`)
	post := func(ctx context.Context, payload []byte, msgID int64) error {
		fmt.Printf("POST %s (message %d)\n", payload, msgID)
		stop()
		return nil
	}

	webhooks := s.Outbox("order-webhooks") // backed by queue "__alk_outbox:order-webhooks"
	err := s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer) VALUES ($1, $2)`, id, who); err != nil {
			return err
		}
		_, err := webhooks.EnqueueTx(ctx, tx, body, store.EnqueueOpts{}) // exists only if the order commits
		return err
	})
	check(err)
	err = webhooks.Run(ctx, store.OutboxOpts{Concurrency: 8, MaxAttempts: 10, Backoff: store.DefaultBackoff},
		func(ctx context.Context, m *store.Job) error {
			return post(ctx, m.Payload, m.ID) // nil: delivered; error: retried after Backoff; store.Permanent: dead now
		})
	fmt.Println(err)
	// Output:
	// POST {"order":7} (message 1)
	// <nil>
}

// Shutdown stops the store's loops in order: a handler in flight finishes
// and its job is settled before the store closes.
func ExampleStore_Shutdown() {
	path, cleanup := tempDB()
	defer cleanup()
	ctx := context.Background()
	s := must(store.Open(ctx, path))
	q := s.Queue("emails")
	_ = must(q.Enqueue(ctx, []byte("to ada"), store.EnqueueOpts{}))
	started := make(chan struct{})
	worked := make(chan error)
	go func() {
		worked <- q.Work(ctx, store.WorkOpts{}, func(ctx context.Context, job *store.Job) error {
			close(started)
			time.Sleep(50 * time.Millisecond) // still running when Shutdown begins
			return nil
		})
	}()
	<-started

	err := s.Shutdown(ctx) // graceful until ctx ends, then a hard stop; Close is Shutdown bounded by DefaultCloseTimeout
	fmt.Println(err, errors.Is(<-worked, store.ErrClosed))

	s = must(store.Open(ctx, path)) // the job was acked before the store closed
	defer s.Close()
	st := must(s.Queue("emails").Stats(ctx))
	fmt.Println(st.Ready, st.Running)
	// Output:
	// <nil> true
	// 0 0
}

// Two members of a consumer group share a keyed stream: each takes half of
// the partitions, a key's events go to one member at a time, in order,
// and each event's effects commit with the group's offset.
func ExampleGroup() {
	s, done := openTemp()
	defer done()
	ctx := context.Background()
	check(s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE ledger (order_offset bigint PRIMARY KEY)`)
		return err
	}))
	orders := s.Stream("orders")
	for i := range 8 {
		_ = must(orders.PublishWithKey(ctx, fmt.Sprint("customer-", i%4), []byte("order")))
	}

	g := orders.Group("billing") // members in any number of processes share it
	a := must(g.Join(ctx, store.GroupOpts{Member: "a", Partitions: 4}))
	b := must(g.Join(ctx, store.GroupOpts{Member: "b"})) // the count is fixed at creation
	ev := must(a.Recv(ctx))                              // rebalances, then the next event of a's partitions
	_ = must(b.Recv(ctx))                                // b takes the other half
	check(s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO ledger (order_offset) VALUES ($1)`, ev.Offset); err != nil {
			return err
		}
		return a.CommitTx(ctx, tx, ev) // ErrClaimLost once the partition is another member's
	}))
	fmt.Println(len(a.Partitions()), len(b.Partitions())) // 2 2
	check(a.Leave(ctx))                                   // b takes a's partitions at its next Recv, without waiting for a lease
	st := must(g.Stats(ctx))                              // members, assignment, committed offsets, lag per partition
	fmt.Println(len(st.Members), st.Lag)
	// Output:
	// 2 2
	// 1 7
}
