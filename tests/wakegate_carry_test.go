package tests

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/wake"
	"github.com/alkstore/alkstore/store"
)

// The wake gate's carrier (store/notify_pg.go, wakeGate.carry): while a
// trailing wake is owed, an auto-commit publish may carry a NOTIFY of its
// own, and its commit then cancels the trailing wake (a trailing NOTIFY is
// a transaction of its own, whose id holds every reader's settled horizon
// while it commits). Only the commit may cancel it: a carrier still in
// flight when the trailing wake fires (its statement waits on a lock, its
// transaction open past the window) must leave the trailing wake to go
// out, or other processes hear of the owed write only if and when the
// carrier commits.

// TestGateSendsTheTrailingWakeWhileItsCarrierWaits: t2, a Tx's write
// inside p1's window, is owed a wake at its commit; the trailing wake
// fires at once (the window set to 0) and is held before it decides
// (wake.SetTrailingHook) while p3, an auto-commit publish that carries a
// NOTIFY, waits on a lock on the events table (a transaction held open).
// Released, the trailing wake must go out while p3 still waits; then p3's
// commit notifies too. In the "fails" rounds p3 is cut by its context
// while it waits (its statement, NOTIFY included, rolled back) before the
// trailing wake is released: it must go out all the same.
func TestGateSendsTheTrailingWakeWhileItsCarrierWaits(t *testing.T) {
	e := newEnv(t, "pg")
	a := e.open(t)
	pool := e.pool(t)
	for round := range 4 {
		fails := round%2 == 1
		c := ctx(t)
		name := fmt.Sprint("gate-carrier-held-", round)
		topic := "s:" + name
		st := a.Stream(name)
		defer wake.SetGateWindow(topic, time.Hour)() // t2 falls inside p1's window however slowly the machine runs
		counts, stopCounting := wake.CountGateTopics(topic)
		defer stopCounting()
		fired, release := make(chan struct{}, 1), make(chan struct{})
		defer wake.SetTrailingHook(topic, func() {
			fired <- struct{}{}
			<-release
		})()
		l := listenWakes(t, e, topic)

		_, err := st.Publish(c, []byte("p1")) // opens the window: notifies
		require.NoError(t, err)
		require.True(t, l.next(t, 10*time.Second), "p1's NOTIFY")
		tx, err := a.Begin(c)
		require.NoError(t, err)
		_, err = st.PublishTx(c, tx, []byte("t2")) // inside the window: owed a wake at its commit
		require.NoError(t, err)
		wake.SetGateWindow(topic, 0) // the window is over: t2's trailing wake fires at its commit
		require.NoError(t, tx.Commit(c))
		<-fired // the trailing wake is scheduled, held before it decides

		holder, err := pool.Begin(c)
		require.NoError(t, err)
		defer holder.Rollback(context.Background()) // a failed round leaves no lock for the cleanup to wait on
		_, err = holder.Exec(c, `LOCK TABLE alkstore.events IN SHARE MODE`)
		require.NoError(t, err)
		pctx, cut := context.WithCancel(c)
		defer cut()
		blocked := make(chan error, 1)
		go func() { // carries a NOTIFY (the window is over), then waits for the lock
			_, err := st.Publish(pctx, []byte("p3"))
			blocked <- err
		}()
		waitForLockWait(t, pool, name)
		if fails {
			cut()
			require.ErrorIs(t, <-blocked, context.Canceled, "p3, cut while it waited")
		}
		close(release)
		require.True(t, l.next(t, 30*time.Second), "round %d: the trailing wake for t2 did not go out while p3, its would-be carrier, waited or after it failed", round)
		require.Zero(t, counts.Covered.Load(), "a carrier that had not committed cancelled the trailing wake")
		if !fails {
			select {
			case err := <-blocked:
				t.Fatalf("p3 returned (%v) while the lock was held", err)
			default:
			}
		}
		require.NoError(t, holder.Rollback(c))
		if !fails {
			require.NoError(t, <-blocked)
			require.True(t, l.next(t, 30*time.Second), "no NOTIFY followed p3's commit")
		}
	}
}

// TestGateCarrierCoversTheTrailingWake: p2, inside p1's window, is owed a
// trailing wake an hour away; p3, published once the window is over,
// carries a NOTIFY, and its commit cancels the trailing wake: Close, which
// sends every trailing wake still owed, sends none. For unkeyed and keyed
// publishes: a keyed one (PublishWithKey) took its wake from the gate
// without reporting its commit, so it never stood in for a trailing wake
// (with one publisher, 1.5 trailing NOTIFYs in 100 keyed publishes, where
// unkeyed ones sent under 0.1).
func TestGateCarrierCoversTheTrailingWake(t *testing.T) {
	e := newEnv(t, "pg")
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprint("keyed=", keyed), func(t *testing.T) {
			c := ctx(t)
			a := e.open(t)
			name := fmt.Sprint("gate-carrier-covers-", keyed)
			topic := "s:" + name
			st := a.Stream(name)
			publish := func(p string) error {
				if keyed {
					_, err := st.PublishWithKey(c, "k", []byte(p))
					return err
				}
				_, err := st.Publish(c, []byte(p))
				return err
			}
			defer wake.SetGateWindow(topic, time.Hour)()
			counts, stopCounting := wake.CountGateTopics(topic)
			defer stopCounting()
			l := listenWakes(t, e, topic)

			require.NoError(t, publish("p1")) // opens the window: notifies
			require.NoError(t, publish("p2")) // inside it: owed a trailing wake
			require.True(t, l.next(t, 10*time.Second), "p1's NOTIFY")
			wake.SetGateWindow(topic, 0)
			require.NoError(t, publish("p3")) // carries a NOTIFY; its commit covers p2
			require.True(t, l.next(t, 10*time.Second), "p3's NOTIFY")
			require.EqualValues(t, 1, counts.Covered.Load(), "p3's commit did not cancel p2's trailing wake")
			require.NoError(t, a.Close())
			require.False(t, l.next(t, 2*time.Second), "Close sent a trailing wake p3's commit had covered")
		})
	}
}

// TestBatchPastHalfTheWindowCarriesItsWake: b1, an auto-commit batch
// (EnqueueMany, PublishMany, keyed or not), opens its topic's window (a
// NOTIFY in its statement); b2, begun once half the window has passed,
// carries a NOTIFY in its own statement too. It carried none, and its
// trailing wake followed its commit: a NOTIFY transaction of its own,
// which back-to-back batches of 2.5-5 ms paid every other batch (0.45-0.5
// a batch for 1,000-event PublishMany batches). Every trailing wake is
// held here (wake.SetTrailingHook) until the round ends, so the NOTIFY
// heard after b2 can only be b2's own. b2 starts at least half the window
// after b1 returned (the sleep bounds the wait from below only); on a
// machine so slow that it starts after the whole window, it carries a
// NOTIFY under either rule and the round proves nothing, but cannot fail.
func TestBatchPastHalfTheWindowCarriesItsWake(t *testing.T) {
	e := newEnv(t, "pg")
	a := e.open(t)
	const window = 2 * time.Second
	key := "k"
	for k, kind := range []string{"EnqueueMany", "PublishMany", "keyed PublishMany"} {
		for round := range 2 {
			c := ctx(t)
			name := fmt.Sprint("batch-carries-", k, "-", round)
			var topic string
			var batch func() (int, error)
			switch kind {
			case "EnqueueMany":
				topic = "q:" + name
				q := a.Queue(name)
				jobs := []store.NewJob{{Payload: []byte(`"a"`)}, {Payload: []byte(`"b"`)}}
				batch = func() (int, error) { ids, err := q.EnqueueMany(c, jobs); return len(ids), err }
			default:
				topic = "s:" + name
				st := a.Stream(name)
				msgs := []store.Message{{Payload: []byte("a")}, {Payload: []byte("b")}}
				if kind == "keyed PublishMany" {
					msgs[0].Key, msgs[1].Key = &key, &key
				}
				batch = func() (int, error) { offs, err := st.PublishMany(c, msgs); return len(offs), err }
			}
			restoreWindow := wake.SetGateWindow(topic, window)
			var held atomic.Int32
			release := make(chan struct{})
			removeHook := wake.SetTrailingHook(topic, func() {
				held.Add(1)
				<-release
			})
			l := listenWakes(t, e, topic)

			n, err := batch() // opens the window: notifies
			require.NoError(t, err)
			require.Equal(t, 2, n)
			time.Sleep(window / 2)
			n, err = batch() // past half the window
			require.NoError(t, err)
			require.Equal(t, 2, n)
			require.True(t, l.next(t, 10*time.Second), "%s: b1's NOTIFY", kind)
			require.True(t, l.next(t, 10*time.Second), "%s, round %d: b2, past half the window, carried no NOTIFY (its trailing wake is held)", kind, round)
			require.Zero(t, held.Load(), "%s: a trailing wake was owed", kind)
			close(release)
			removeHook()
			restoreWindow()
		}
	}
}

// TestGateCarrierPostponesTheTrailingWake: with several publishers a write
// is nearly always committing while a carrier runs, so the carrier's
// commit left the trailing wake to go out at the end of nearly every
// window, an auto-commit NOTIFY transaction of its own (0.4-0.8 in 100
// publishes with 8 publishers). Here p2, inside p1's window, is owed a
// trailing wake; c, a keyed publish past half the window, carries a NOTIFY
// and waits in a trigger for an advisory lock the test holds; an open
// Tx's publish commits (owed a wake after c began); then the test lets c
// commit. (c waited for the Tx's head row before, which the Tx's COMMIT
// freed at the server before the client ran its owe, so c's commit
// sometimes came first and cancelled the trailing wake, as it should:
// review59a F2, 1 run in 3 to 8.) The trailing wake must
// move to a window after c's NOTIFY (Postponed), and c2, published half a
// window after c with nothing owed after it began, must cancel it: no
// trailing wake goes out, three NOTIFYs in all. A round in which c
// returned a window or more after p1 began, or c2 a window after c began,
// proves nothing (the trailing wake may fire first, as it should) but
// cannot fail.
func TestGateCarrierPostponesTheTrailingWake(t *testing.T) {
	e := newEnv(t, "pg")
	a := e.open(t)
	pool := e.pool(t)
	_, err := pool.Exec(ctx(t), `CREATE FUNCTION public.test_hold_c() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.stream LIKE 'gate-carrier-postpones-%' AND NEW.payload = 'c' THEN
				PERFORM pg_advisory_xact_lock(59059);
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER test_hold_c BEFORE INSERT ON alkstore.events FOR EACH ROW EXECUTE FUNCTION public.test_hold_c()`)
	require.NoError(t, err)
	hold, err := pool.Acquire(ctx(t)) // holds the advisory lock c waits for
	require.NoError(t, err)
	defer hold.Release()
	const window = 2 * time.Second
	proved := 0
	for round := range 2 {
		c := ctx(t)
		name := fmt.Sprint("gate-carrier-postpones-", round)
		topic := "s:" + name
		st := a.Stream(name)
		restoreWindow := wake.SetGateWindow(topic, window)
		counts, stopCounting := wake.CountGateTopics(topic)
		var fired atomic.Int32
		removeHook := wake.SetTrailingHook(topic, func() { fired.Add(1) })
		l := listenWakes(t, e, topic)

		beforeP1 := time.Now()
		_, err := st.Publish(c, []byte("p1")) // opens the window: notifies
		require.NoError(t, err)
		tx, err := a.Begin(c)
		require.NoError(t, err)
		_, err = st.PublishWithKeyTx(c, tx, "k", []byte("t")) // holds k's head row; owed a wake at its commit
		require.NoError(t, err)
		_, err = st.Publish(c, []byte("p2")) // inside the window: owed a trailing wake
		require.NoError(t, err)
		time.Sleep(window / 2)

		_, err = hold.Exec(c, `SELECT pg_advisory_lock(59059)`)
		require.NoError(t, err)
		beforeC := time.Now()
		done := make(chan error, 1)
		go func() { // carries a NOTIFY, then waits for the advisory lock
			_, err := st.PublishWithKey(c, "k", []byte("c"))
			done <- err
		}()
		waitForLockWait(t, pool, name)
		require.NoError(t, tx.Commit(c)) // owed after c began, before c commits
		_, err = hold.Exec(c, `SELECT pg_advisory_unlock(59059)`)
		require.NoError(t, err)
		require.NoError(t, <-done)
		cReturned := time.Now()
		time.Sleep(window / 2)
		_, err = st.Publish(c, []byte("c2")) // past half the window after c: carries, nothing owed after it began
		require.NoError(t, err)
		c2Returned := time.Now()

		if cReturned.Sub(beforeP1) < window && c2Returned.Sub(beforeC) < window {
			proved++
			require.Zero(t, fired.Load(), "round %d: a trailing wake went out", round)
			require.EqualValues(t, 1, counts.Postponed.Load(), "round %d: c's commit did not move the trailing wake owed after it began", round)
			require.EqualValues(t, 1, counts.Covered.Load(), "round %d: c2's commit did not cancel the trailing wake", round)
			for i := range 3 {
				require.True(t, l.next(t, 10*time.Second), "round %d: NOTIFY %d of p1, c, c2", round, i+1)
			}
			require.False(t, l.next(t, window/4), "round %d: a NOTIFY beside p1's, c's and c2's", round) // the trailing wake is cancelled: nothing is due
		}
		removeHook()
		stopCounting()
		restoreWindow()
	}
	t.Logf("%d of 2 rounds in time to prove it", proved)
}
