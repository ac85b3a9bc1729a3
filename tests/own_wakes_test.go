package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestEveryPublishWakesBothStoresReceivers: a store on PostgreSQL does not
// act on the stream wakes its own connections send (they come back through
// its feed): each of its writes wakes its receivers in process instead.
// Two stores on one database (two processes as far as the feed can tell)
// publish in turn, every way a stream is written, auto-commit and in a Tx,
// back to back, so the wake gate holds most NOTIFYs back for trailing
// wakes. With SafetyPoll an hour only a wake delivers: a wake lost either
// way (a store's own write left to an echo it ignores, another store's
// NOTIFY taken for its own) fails the round after 30 s.
func TestEveryPublishWakesBothStoresReceivers(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		stores := []*store.Store{e.open(t), e.open(t)}
		var rs []*store.EventReceiver
		for _, s := range stores {
			r, err := s.Stream("both").Subscribe(c, "c", store.SubscribeOpts{SafetyPoll: time.Hour})
			require.NoError(t, err)
			defer r.Close()
			rs = append(rs, r)
		}
		key := "k"
		writes := []struct {
			name    string
			publish func(s *store.Store, st *store.Stream) ([]int64, error)
		}{
			{"Publish", func(_ *store.Store, st *store.Stream) ([]int64, error) {
				off, err := st.Publish(c, []byte("p"))
				return []int64{off}, err
			}},
			{"PublishWithKey", func(_ *store.Store, st *store.Stream) ([]int64, error) {
				off, err := st.PublishWithKey(c, key, []byte("k"))
				return []int64{off}, err
			}},
			{"PublishMany", func(_ *store.Store, st *store.Stream) ([]int64, error) {
				return st.PublishMany(c, []store.Message{{Payload: []byte("m1")}, {Key: &key, Payload: []byte("m2")}})
			}},
			{"PublishTx", func(s *store.Store, st *store.Stream) ([]int64, error) {
				tx, err := s.Begin(c)
				if err != nil {
					return nil, err
				}
				off, err := st.PublishTx(c, tx, []byte("t"))
				if err != nil {
					_ = tx.Rollback(c)
					return nil, err
				}
				return []int64{off}, tx.Commit(c)
			}},
			// A store Tx's own driver transaction adopted (Tx.Pgx, Tx.SQL),
			// or a savepoint of it on PostgreSQL, as layered code that takes
			// a pgx.Tx does: the adopted Tx's commit is the caller's, so only
			// the NOTIFY wakes, from a connection of the store's own pool
			// (review, session 48: this store's receivers waited for the
			// SafetyPoll).
			{"PublishTx adopting Tx.Pgx", func(s *store.Store, st *store.Stream) ([]int64, error) {
				return publishAdopted(c, s, s, st, false)
			}},
			{"PublishTx adopting a savepoint of Tx.Pgx", func(s *store.Store, st *store.Stream) ([]int64, error) {
				return publishAdopted(c, s, s, st, true)
			}},
			{"PublishTx adopting the other store's Tx.Pgx", func(s *store.Store, st *store.Stream) ([]int64, error) {
				other := stores[0]
				if s == other {
					other = stores[1]
				}
				return publishAdopted(c, other, s, st, false)
			}},
		}
		for round := range 40 {
			for i, s := range stores {
				w := writes[(round+i)%len(writes)]
				offs, err := w.publish(s, s.Stream("both"))
				require.NoError(t, err)
				for j, r := range rs {
					for _, off := range offs {
						rctx, cancel := context.WithTimeout(c, 30*time.Second) // far below SafetyPoll
						ev, err := r.Recv(rctx)
						cancel()
						require.NoError(t, err, "round %d: store %d's %s did not wake store %d's receiver", round, i, w.name, j)
						require.Equal(t, off, ev.Offset)
					}
				}
			}
		}
	})
}

// publishAdopted publishes to st, a stream of s, in a transaction owner
// began, through the Tx s.AdoptPgx (AdoptSQL on SQLite) makes of its
// driver transaction, or on PostgreSQL of a savepoint in it, then commits
// owner's Tx.
func publishAdopted(c context.Context, owner, s *store.Store, st *store.Stream, savepoint bool) ([]int64, error) {
	tx, err := owner.Begin(c)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(c) }()
	var adopted store.Tx
	var release func() error
	if ptx, ok := tx.Pgx(); ok {
		if savepoint {
			sp, err := ptx.Begin(c)
			if err != nil {
				return nil, err
			}
			ptx, release = sp, func() error { return sp.Commit(c) }
		}
		adopted, err = s.AdoptPgx(ptx)
	} else {
		stx, _ := tx.SQL()
		adopted, err = s.AdoptSQL(stx)
	}
	if err != nil {
		return nil, err
	}
	off, err := st.PublishTx(c, adopted, []byte("a"))
	if err != nil {
		return nil, err
	}
	if release != nil {
		if err := release(); err != nil {
			return nil, err
		}
	}
	return []int64{off}, tx.Commit(c)
}
