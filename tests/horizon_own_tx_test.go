package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// An event the store published (auto-commit) before a Tx of the same store
// began is not held behind that Tx, although the Tx still runs and holds a
// transaction id by the time the receiver reads: every offset the Tx draws
// is higher, and the Tx's first publish tells the store its id, which
// proves a candidate for what was drawn before it began
// (docs/design/stream-horizon.md, "A store's own transactions"). The stop
// 35 pg review found the receiver waiting for the Tx's end. Deterministic:
// the receiver's first read comes after the Tx took its id and published,
// so on PostgreSQL no candidate a snapshot yields settles the event while
// the Tx runs (each such snapshot's xmin is at most the Tx's id, its next
// above it); only the Tx's own candidate can. The Tx stays open until the
// event arrives; the bound only ends a failing run (other tests'
// transactions on the same server may hold the horizon for a while).
// Every publish form a Tx can begin with, and a Tx whose first write is an
// enqueue or the application's own SQL. On SQLite the Tx holds the writer,
// which no read waits for: the same body holds there.
func TestEventsPublishedBeforeTheStoresTxAreNotHeldBehindIt(t *testing.T) {
	firsts := []struct {
		name  string
		write func(c context.Context, s *store.Store, tx store.Tx, st *store.Stream) error
	}{
		{"PublishTx", func(c context.Context, _ *store.Store, tx store.Tx, st *store.Stream) error {
			_, err := st.PublishTx(c, tx, []byte("tx"))
			return err
		}},
		{"PublishWithKeyTx", func(c context.Context, _ *store.Store, tx store.Tx, st *store.Stream) error {
			_, err := st.PublishWithKeyTx(c, tx, "k", []byte("tx"))
			return err
		}},
		{"PublishMessageTx", func(c context.Context, _ *store.Store, tx store.Tx, st *store.Stream) error {
			_, err := st.PublishMessageTx(c, tx, store.Message{Payload: []byte("tx"), Headers: map[string]string{"h": "v"}})
			return err
		}},
		{"PublishManyTx", func(c context.Context, _ *store.Store, tx store.Tx, st *store.Stream) error {
			k := "k"
			_, err := st.PublishManyTx(c, tx, []store.Message{{Payload: []byte("tx")}, {Key: &k, Payload: []byte("tx")}})
			return err
		}},
		{"EnqueueTx, then PublishTx", func(c context.Context, s *store.Store, tx store.Tx, st *store.Stream) error {
			if _, err := s.Queue(st.Name()+"-jobs").EnqueueTx(c, tx, []byte("job"), store.EnqueueOpts{}); err != nil {
				return err
			}
			_, err := st.PublishTx(c, tx, []byte("tx"))
			return err
		}},
		{"Exec, then PublishTx", func(c context.Context, _ *store.Store, tx store.Tx, st *store.Stream) error {
			// The application's own write takes the transaction id.
			if _, err := tx.Exec(c, fmt.Sprintf("CREATE TABLE %s (v integer)", "app_"+st.Name())); err != nil {
				return err
			}
			if _, err := tx.Exec(c, fmt.Sprintf("INSERT INTO %s (v) VALUES ($1)", "app_"+st.Name()), 1); err != nil {
				return err
			}
			_, err := st.PublishTx(c, tx, []byte("tx"))
			return err
		}},
	}
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		for i, f := range firsts {
			st := s.Stream(fmt.Sprint("owntx", i))
			before, err := st.Publish(c, []byte("before"))
			require.NoError(t, err)
			tx, err := s.Begin(c)
			require.NoError(t, err)
			defer tx.Rollback(c) // a no-op after the Commit; ends it when the test fails
			require.NoError(t, f.write(c, s, tx, st), f.name)

			r, err := st.Follow(c, 0, store.SubscribeOpts{SafetyPoll: time.Hour})
			require.NoError(t, err)
			ev, ok := recvIn(t, r, 30*time.Second)
			require.True(t, ok, "%s: the event published before the Tx began waited for the Tx", f.name)
			require.Equal(t, before, ev.Offset, f.name)
			_, ok = recvIn(t, r, 50*time.Millisecond)
			require.False(t, ok, "%s: an event of the open Tx was delivered", f.name)

			require.NoError(t, tx.Commit(c))
			ev, ok = recvIn(t, r, 30*time.Second)
			require.True(t, ok, "%s: the Tx's event after its commit", f.name)
			require.Greater(t, ev.Offset, before, f.name)
			r.Close()
		}
	})
}

// The stop 35 review's form: the receiver follows throughout, so its reads
// may come before the Tx took its id (then a snapshot proves the event), or
// after it and before the Tx's publish returned (then the read is held, and
// the Tx's publish, offering its candidate, wakes it as the Tx's end would),
// or after the publish. Each round the event must arrive while the Tx is
// open. Before the fix 5 or 6 rounds of 10 waited for the Tx's end.
func TestAFollowingReceiverGetsEventsPublishedBeforeTheStoresTx(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("owntx-follow")
		r, err := st.Follow(c, 0, store.SubscribeOpts{SafetyPoll: time.Hour})
		require.NoError(t, err)
		defer r.Close()
		for i := range 10 {
			before, err := st.Publish(c, []byte("auto"))
			require.NoError(t, err)
			tx, err := s.Begin(c)
			require.NoError(t, err)
			defer tx.Rollback(c) // a no-op after the Commit; ends it when the test fails
			own, err := st.PublishTx(c, tx, []byte("tx"))
			require.NoError(t, err)
			ev, ok := recvIn(t, r, 30*time.Second)
			require.True(t, ok, "round %d: the event published before the Tx began waited for the Tx", i)
			require.Equal(t, before, ev.Offset, "round %d", i)
			require.NoError(t, tx.Commit(c))
			ev, ok = recvIn(t, r, 30*time.Second)
			require.True(t, ok, "round %d: the Tx's event", i)
			require.Equal(t, own, ev.Offset, "round %d", i)
		}
	})
}

// A Tx the store began that has published reads, on another stream, what
// the store published before the Tx began, while the Tx's own id holds its
// snapshots' xmin back: the candidate its first publish offered settles in
// its own snapshot once the transactions older than it have ended. Before,
// it got nothing of that stream until a horizon proven before it took its
// id covered the event (README, Transactions: "read before you write").
// Each read is a new statement with a new snapshot (READ COMMITTED), so the
// loop reads until the event is there; only a failing run reaches the bound
// (other tests' transactions on the same server may run meanwhile).
func TestATxThatPublishedReadsWhatWasPublishedBeforeItBegan(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		a, b := s.Stream("owntx-read-a"), s.Stream("owntx-read-b")
		before, err := a.Publish(c, []byte("before"))
		require.NoError(t, err)
		tx, err := s.Begin(c)
		require.NoError(t, err)
		defer tx.Rollback(c)
		_, err = b.PublishTx(c, tx, []byte("tx"))
		require.NoError(t, err)
		deadline := time.Now().Add(30 * time.Second)
		for {
			evs, err := a.ReadSinceTx(c, tx, 0, 10)
			require.NoError(t, err)
			if len(evs) > 0 {
				require.Equal(t, before, evs[0].Offset)
				break
			}
			require.True(t, time.Now().Before(deadline), "the Tx never read the event published before it began")
			time.Sleep(10 * time.Millisecond)
		}
		require.NoError(t, tx.Commit(c))
	})
}

// A Tx's first publish still frees what the store published before the Tx
// began after a long transaction of another connection held the horizon
// through many such Txs (more pending candidates than the store keeps):
// once that transaction ends, the event arrives while the Tx runs. The
// stop 36 review found the store dropping the newest pending candidates,
// the Tx's offer among them, so the event waited for the Tx's end. On
// SQLite no reader waits for a transaction: the same body, without the long
// transaction, holds there.
func TestAnOfferAfterALongHoldStillFreesEarlierEvents(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		st := s.Stream("long-hold")
		end := holdALongTransaction(t, e)
		r, err := st.Follow(c, 0, store.SubscribeOpts{SafetyPoll: time.Hour})
		require.NoError(t, err)
		defer r.Close()
		for range 150 { // each round offers a candidate and reads one
			_, err := st.Publish(c, []byte("auto"))
			require.NoError(t, err)
			tx, err := s.Begin(c)
			require.NoError(t, err)
			_, err = st.PublishTx(c, tx, []byte("tx"))
			require.NoError(t, err)
			_, err = st.ReadSince(c, 0, 1)
			require.NoError(t, err)
			require.NoError(t, tx.Commit(c))
		}
		n, err := st.Publish(c, []byte("N"))
		require.NoError(t, err)
		tx, err := s.Begin(c)
		require.NoError(t, err)
		defer tx.Rollback(c) // a no-op after the Commit; ends it when the test fails
		_, err = st.PublishTx(c, tx, []byte("T"))
		require.NoError(t, err)
		end()
		for {
			ev, ok := recvIn(t, r, 30*time.Second)
			require.True(t, ok, "event %d, published before the Tx began, waits for the Tx's end", n)
			require.LessOrEqual(t, ev.Offset, n, "an event of the open Tx arrived")
			if ev.Offset == n {
				break
			}
		}
		require.NoError(t, tx.Commit(c))
	})
}

// holdALongTransaction opens a transaction on another connection that holds
// a transaction id (PostgreSQL; nothing on SQLite) and returns what ends it.
func holdALongTransaction(t *testing.T, e *engineEnv) (end func()) {
	t.Helper()
	c := ctx(t)
	if e.name == "pg" {
		x, err := e.pool(t).Begin(c)
		require.NoError(t, err)
		var xid string
		require.NoError(t, x.QueryRow(c, "SELECT pg_current_xact_id()::text").Scan(&xid))
		t.Cleanup(func() { _ = x.Rollback(context.Background()) })
		return func() { require.NoError(t, x.Commit(c)) }
	}
	return func() {} // SQLite: a transaction of another connection would hold the writer, which no read waits for
}
