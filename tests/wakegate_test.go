package tests

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/wake"
	"github.com/alkstore/alkstore/store"
)

// The Postgres wake gate (store/notify_pg.go): the first write to a topic
// in a window carries its NOTIFY, later ones carry none and are announced by
// a trailing NOTIFY after they commit. These tests force the gate's
// decisions with a window of seconds for their own topic
// (wake.SetGateWindow), barriers on the notifications a raw LISTEN
// connection hears, and a statement held on a row lock; what they assert is
// the NOTIFY other processes hear. SQLite has no gate (other processes'
// watchers see every commit), and these interleavings cannot run there:
// a Tx holds the one writer, so the auto-commit writes beside it would wait
// for it.

// gateWindow is the window the tests give their topics: every write they
// make inside one falls in it unless the machine takes that long for a few
// statements, which each test checks rather than assumes.
const gateWindow = 3 * time.Second

// wakeListener is a raw LISTEN on the store's wake channel, hearing the
// NOTIFYs of one topic.
type wakeListener struct {
	conn    *pgx.Conn
	payload string
}

func listenWakes(t *testing.T, e *engineEnv, topic string) *wakeListener {
	t.Helper()
	conn, err := pgx.Connect(ctx(t), e.dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx(t), `LISTEN alkstore`)
	require.NoError(t, err)
	return &wakeListener{conn: conn, payload: wake.EncodeWake(topic)}
}

// next waits up to d for the topic's next NOTIFY; false when none came.
func (l *wakeListener) next(t *testing.T, d time.Duration) bool {
	t.Helper()
	c, cancel := context.WithTimeout(ctx(t), d)
	defer cancel()
	for {
		n, err := l.conn.WaitForNotification(c)
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			return false
		}
		if n.Payload == l.payload {
			return true
		}
	}
}

// TestGateAnnouncesATxWriteAfterItsCommit: a write in a Tx, inside the
// window an auto-commit write opened, carries no NOTIFY; a later
// auto-commit write's trailing wake goes out while the Tx is still open.
// The Tx's commit must be followed by a NOTIFY of its own, or other
// processes hear of its write only at their safety poll (stop 32's
// review). For a stream and a queue.
func TestGateAnnouncesATxWriteAfterItsCommit(t *testing.T) {
	e := newEnv(t, "pg")
	a := e.open(t)
	for _, kind := range []string{"stream", "queue"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // beside the other kind only: the test stays serial
			retryWhileSlow(t, func(attempt int) bool {
				c := ctx(t)
				name := fmt.Sprint("gate-tx-", kind, "-", attempt)
				topic := "s:" + name
				write := func(tx *store.Tx, payload string) {
					t.Helper()
					var err error
					switch {
					case kind == "stream" && tx == nil:
						_, err = a.Stream(name).Publish(c, []byte(payload))
					case kind == "stream":
						_, err = a.Stream(name).PublishTx(c, *tx, []byte(payload))
					case tx == nil:
						_, err = a.Queue(name).Enqueue(c, []byte(payload), store.EnqueueOpts{})
					default:
						_, err = a.Queue(name).EnqueueTx(c, *tx, []byte(payload), store.EnqueueOpts{})
					}
					require.NoError(t, err)
				}
				if kind == "queue" {
					topic = "q:" + name
				}
				defer wake.SetGateWindow(topic, gateWindow)()
				l := listenWakes(t, e, topic)

				tx, err := a.Begin(c)
				require.NoError(t, err)
				defer tx.Rollback(c)
				start := time.Now()
				write(nil, "p1") // opens the window: notifies in its statement
				write(&tx, "t2") // inside it: no NOTIFY
				write(nil, "p3") // inside it: a trailing wake when it closes
				if took := time.Since(start); took >= gateWindow {
					t.Logf("attempt %d: three writes took %v, longer than the window the test needs them in", attempt, took)
					return false
				}
				require.True(t, l.next(t, 10*time.Second), "p1's NOTIFY")
				require.True(t, l.next(t, 10*time.Second), "the trailing wake for p3, before the Tx commits")
				require.NoError(t, tx.Commit(c))
				require.True(t, l.next(t, 2*gateWindow+5*time.Second), "no NOTIFY followed the commit of the Tx's write")
				return true
			})
		})
	}
}

// retryWhileSlow runs attempt until it reports that the machine was quick
// enough for the interleaving it needs (its writes inside one gate window),
// at most five times: on a loaded machine a few statements may outlast the
// window, which proves nothing either way. Each attempt uses fresh names.
func retryWhileSlow(t *testing.T, attempt func(n int) bool) {
	t.Helper()
	for n := range 5 {
		if attempt(n) {
			return
		}
	}
	t.Fatalf("five attempts were all slower than the gate window %v", gateWindow)
}

// TestGateAnnouncesAnAutoCommitWriteThatCommitsAfterTheTrailingWake: an
// auto-commit write inside the window waits on a row lock after the gate
// passed it without a NOTIFY; the trailing wake goes out meanwhile. Its
// commit, once the lock is gone, must be followed by a NOTIFY of its own.
func TestGateAnnouncesAnAutoCommitWriteThatCommitsAfterTheTrailingWake(t *testing.T) {
	e := newEnv(t, "pg")
	a := e.open(t)
	pool := e.pool(t)
	retryWhileSlow(t, func(attempt int) bool {
		c := ctx(t)
		name := fmt.Sprint("gate-auto-", attempt)
		st := a.Stream(name)
		defer wake.SetGateWindow("s:"+name, gateWindow)()
		l := listenWakes(t, e, "s:"+name)

		start := time.Now()
		_, err := st.PublishWithKey(c, "k", []byte("p1")) // opens the window; the key's head row exists now
		require.NoError(t, err)
		holder, err := pool.Begin(c)
		require.NoError(t, err)
		defer holder.Rollback(c)
		_, err = holder.Exec(c, `SELECT 1 FROM alkstore.compaction_heads WHERE stream = $1 AND key = 'k' FOR UPDATE`, name)
		require.NoError(t, err)
		blocked := make(chan error, 1)
		go func() { // inside the window: no NOTIFY; its statement waits for the head row
			_, err := st.PublishWithKey(c, "k", []byte("p2"))
			blocked <- err
		}()
		waitForLockWait(t, pool, name)
		_, err = st.Publish(c, []byte("p3")) // inside the window: a trailing wake when it closes
		require.NoError(t, err)
		if took := time.Since(start); took >= gateWindow {
			t.Logf("attempt %d: the writes took %v, longer than the window the test needs them in", attempt, took)
			require.NoError(t, holder.Rollback(c))
			require.NoError(t, <-blocked)
			return false
		}
		require.True(t, l.next(t, 10*time.Second), "p1's NOTIFY")
		require.True(t, l.next(t, 10*time.Second), "the trailing wake for p3, while p2 waits")
		require.NoError(t, holder.Rollback(c))
		require.NoError(t, <-blocked)
		require.True(t, l.next(t, 2*gateWindow+5*time.Second), "no NOTIFY followed p2's commit")
		return true
	})
}

// waitForLockWait returns once a backend of the database waits for a lock
// (the publish blocked on the head row), polling pg_stat_activity.
func waitForLockWait(t *testing.T, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		require.NoError(t, pool.QueryRow(ctx(t), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no statement waits for a lock (%s)", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGateAnnouncesATxWriteCommittedJustBeforeClose: `tx.Commit; s.Close()`
// where the Tx's write went without a NOTIFY and its trailing wake's timer
// ran out (the window was over at the commit) but has not sent yet when
// Close runs: Close must send it before the pool closes, or the committed
// write is never announced (review of week 33: 7 of 29 lost). The test
// holds the fired trailing wake (wake.SetTrailingHook) until Close
// returned, and ends the window at the commit by setting it to 0, so each
// round forces that interleaving. In the first two rounds the gate's sweep
// (which prunes idle topics) looks at the held wake's entry before Close
// runs, and must keep it: flush sends only the wakes its table still has.
func TestGateAnnouncesATxWriteCommittedJustBeforeClose(t *testing.T) {
	e := newEnv(t, "pg")
	for round := 0; round < 8; round++ {
		c := ctx(t)
		name := fmt.Sprint("gate-close-", round)
		topic := "s:" + name
		restoreWindow := wake.SetGateWindow(topic, gateWindow)
		counts, stopCounting := wake.CountGateTopics(topic)
		fired, release := make(chan struct{}, 1), make(chan struct{})
		removeHook := wake.SetTrailingHook(topic, func() {
			fired <- struct{}{}
			<-release
		})
		l := listenWakes(t, e, topic)
		a, err := store.Open(c, e.dsn)
		require.NoError(t, err)
		tx, err := a.Begin(c)
		require.NoError(t, err)
		start := time.Now()
		_, err = a.Stream(name).Publish(c, []byte("p1")) // opens the window: notifies
		require.NoError(t, err)
		_, err = a.Stream(name).PublishTx(c, tx, []byte("t2")) // inside it: owed a wake at its commit
		require.NoError(t, err)
		if took := time.Since(start); took >= gateWindow {
			t.Fatalf("two writes took %v, longer than the window the test needs them in", took)
		}
		require.True(t, l.next(t, 10*time.Second), "p1's NOTIFY")
		wake.SetGateWindow(topic, 0) // the window is over: the owed wake fires at once
		require.NoError(t, tx.Commit(c))
		<-fired // the trailing wake's timer ran out; it is held before it sends
		if round < 2 {
			looked := counts.Kept.Load() + counts.Pruned.Load() // sweeps before the hold count not
			waitFor(t, "a sweep of the gate looked at the held wake's entry", func() bool {
				return counts.Kept.Load()+counts.Pruned.Load() > looked
			})
			require.Zero(t, counts.Pruned.Load(), "the sweep pruned an entry whose trailing wake was owed")
		}
		require.NoError(t, a.Close())
		close(release)
		require.True(t, l.next(t, 10*time.Second), "round %d: the Tx's write, committed before Close, was never announced", round)
		removeHook()
		stopCounting()
		restoreWindow()
	}
}

// TestCloseWaitsForAWakeSendInProgress: a trailing wake that fire already
// claimed is being sent (held in its send, wake.SetSendHook) when Close
// runs. Close must wait for that send before it closes the pool, and the
// NOTIFY must go out; a Close that returned while the send was held would
// leave it to run on a closed pool. The test releases the send only once
// Close's goroutine waits in the gate's flush (read from the goroutines'
// stacks, no timing), and fails if Close returns first.
func TestCloseWaitsForAWakeSendInProgress(t *testing.T) {
	e := newEnv(t, "pg")
	c := ctx(t)
	name := "gate-close-sending"
	topic := "s:" + name
	// A window of an hour: t2 falls inside it however slowly the machine
	// runs; it is set to 0 before the commit, so the owed wake fires then.
	defer wake.SetGateWindow(topic, time.Hour)()
	sending, release := make(chan struct{}, 1), make(chan struct{})
	defer wake.SetSendHook(topic, func() {
		sending <- struct{}{}
		<-release
	})()
	l := listenWakes(t, e, topic)
	a, err := store.Open(c, e.dsn)
	require.NoError(t, err)
	tx, err := a.Begin(c)
	require.NoError(t, err)
	_, err = a.Stream(name).Publish(c, []byte("p1")) // opens the window: notifies
	require.NoError(t, err)
	_, err = a.Stream(name).PublishTx(c, tx, []byte("t2")) // inside it: owed a wake at its commit
	require.NoError(t, err)
	require.True(t, l.next(t, 10*time.Second), "p1's NOTIFY")
	wake.SetGateWindow(topic, 0) // the window is over: the owed wake fires at once
	require.NoError(t, tx.Commit(c))
	<-sending // fire claimed the trailing wake and is held in its send

	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	waitFor(t, "Close waits for the send in the gate's flush", func() bool {
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) while a wake send was in progress", err)
		default:
		}
		return goroutineWaits("TestCloseWaitsForAWakeSendInProgress", "(*wakeGate).flush", "(*WaitGroup).Wait")
	})
	close(release)
	require.NoError(t, <-closed)
	require.True(t, l.next(t, 10*time.Second), "the wake Close waited for never went out")
}

// TestGatePrunesIdleTopics: the Postgres wake gate keeps a topic's entry
// only while it decides something (the topic's window open, or a trailing
// wake owed). After writes to 10,000 distinct topics (a tenth of them
// twice in a row, so owed trailing wakes and their timers too) every entry
// is pruned again, counted through wake.CountGateTopics; a later write to
// one of them still notifies. (Before: an entry, and a timer for each
// owed wake, for every name ever written, for the store's life.)
func TestGatePrunesIdleTopics(t *testing.T) {
	e := newEnv(t, "pg")
	s := e.open(t)
	c := ctx(t)
	const prefix, n = "gate-prune/", 10_000
	counts, stop := wake.CountGateTopics("q:" + prefix)
	defer stop()
	tx, err := s.Begin(c)
	require.NoError(t, err)
	defer tx.Rollback(c)
	for i := range n {
		q := s.Queue(fmt.Sprint(prefix, i))
		for range 1 + boolInt(i%10 == 0) {
			_, err := q.EnqueueTx(c, tx, nil, store.EnqueueOpts{})
			require.NoError(t, err)
		}
	}
	require.NoError(t, tx.Commit(c))
	require.GreaterOrEqual(t, counts.Added.Load(), int64(n), "an entry for each topic")
	waitFor(t, "the gate pruned every topic", func() bool {
		return counts.Pruned.Load() == counts.Added.Load()
	})
	t.Logf("added %d, kept by a sweep %d, pruned %d", counts.Added.Load(), counts.Kept.Load(), counts.Pruned.Load())

	topic := "q:" + prefix + "0"
	l := listenWakes(t, e, topic)
	_, err = s.Queue(prefix+"0").Enqueue(c, nil, store.EnqueueOpts{})
	require.NoError(t, err)
	require.True(t, l.next(t, 10*time.Second), "a write to a pruned topic notifies")
}

// waitFor polls cond every millisecond until it holds, for up to a minute
// (a deadline for a hung test, not a timing the test depends on).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// goroutineOfWaits tells whether a goroutine of t's (one labelled runs
// t's body in, or one started from it: goroutines inherit their creator's
// profiler labels) has every one of frames on its stack. goroutineWaits
// with a creator as wide as "alkstore/store." also matched the goroutines
// of the tests running beside t (the other form's store waiting on its
// own foreign lock), and the wait it guarded ended early.
func goroutineOfWaits(t *testing.T, frames ...string) bool {
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatalf("goroutine profile: %v", err)
	}
	label := fmt.Sprintf("%q:%q", "test", t.Name())
	for _, g := range strings.Split(b.String(), "\n\n") {
		if !strings.Contains(g, "# labels: ") || !strings.Contains(g, label) {
			continue
		}
		all := true
		for _, f := range frames {
			all = all && strings.Contains(g, f)
		}
		if all {
			return true
		}
	}
	return false
}

// goroutineWaits tells whether a goroutine that creator started has every
// one of frames on its stack.
func goroutineWaits(creator string, frames ...string) bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, creator) {
			continue
		}
		all := true
		for _, f := range frames {
			all = all && strings.Contains(g, f)
		}
		if all {
			return true
		}
	}
	return false
}

// TestGateAnnouncesATxWriteWhoseTopicWasPruned: a write in a Tx, inside
// another write's window, carries no NOTIFY and is owed one at its commit;
// the debt lives with the Tx, not in the gate's table, so while the Tx
// stays open past the window a sweep prunes the topic's entry. The commit
// must still be followed by a NOTIFY (the fresh-eyes review of the pruning:
// owe found no entry and sent nothing, so another process heard of the
// write only at its safety poll). The window ends when the test sets it to
// 0, and the test waits for the sweep to prune the entry: no timing.
func TestGateAnnouncesATxWriteWhoseTopicWasPruned(t *testing.T) {
	e := newEnv(t, "pg")
	a := e.open(t)
	for round := range 3 {
		c := ctx(t)
		name := fmt.Sprint("gate-pruned-", round)
		topic := "s:" + name
		restore := wake.SetGateWindow(topic, time.Hour)
		counts, stopCounting := wake.CountGateTopics(topic)
		l := listenWakes(t, e, topic)
		st := a.Stream(name)

		_, err := st.Publish(c, []byte("w0")) // opens the window: notifies
		require.NoError(t, err)
		require.True(t, l.next(t, 10*time.Second), "round %d: w0's NOTIFY", round)
		tx, err := a.Begin(c)
		require.NoError(t, err)
		_, err = st.PublishTx(c, tx, []byte("w1")) // inside it: no NOTIFY, owed one at commit
		require.NoError(t, err)

		wake.SetGateWindow(topic, 0) // the window is over: the next sweep prunes the entry
		waitFor(t, "a sweep pruned the topic", func() bool { return counts.Pruned.Load() > 0 })
		require.NoError(t, tx.Commit(c))
		require.True(t, l.next(t, 10*time.Second), "round %d: no NOTIFY followed the commit of the Tx's write", round)
		stopCounting()
		restore()
	}
}
