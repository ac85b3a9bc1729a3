package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// A store that has never read settles at once up to what another store
// proved settled (docs/design/stream-horizon.md, step 6; attack55b F1).
// Before, on PostgreSQL, a fresh store (a restarted consumer, a one-shot
// reader, `alkstore streams tail`) had no settled candidate and read
// nothing, even events committed long before, until every write
// transaction running anywhere on the server at its first read had ended.
// Here the first store reads with nothing running, so it proves its
// candidate and stores it (waited for with a bounded poll of the row);
// then a write transaction in another database of the server is held open
// and fresh stores read the events committed before it began, through
// each kind of read, while it still runs. On SQLite nothing holds a read
// back: the same body holds trivially.
func TestAFreshStoreReadsWhatAnotherStoreProvedSettled(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		st := s.Stream("proven")
		var want []int64
		for range 3 {
			off, err := st.Publish(c, []byte("before"))
			require.NoError(t, err)
			want = append(want, off)
		}
		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		require.Equal(t, want, offsets(evs), "nothing runs: the first store's read settles")
		if e.name == "pg" {
			p := e.pool(t)
			deadline := time.Now().Add(30 * time.Second)
			for {
				var head int64
				require.NoError(t, p.QueryRow(c, "SELECT head FROM alkstore.settled_candidate").Scan(&head))
				if head >= want[2] {
					break
				}
				require.True(t, time.Now().Before(deadline), "the store stored no proven candidate (head %d)", head)
				time.Sleep(10 * time.Millisecond)
			}
		}

		_, _, commit := otherDatabaseWriter(t, e) // holds the horizon back on PostgreSQL
		later, err := st.Publish(c, []byte("while held"))
		require.NoError(t, err)

		fresh := e.open(t)
		evs, err = fresh.Stream("proven").ReadSince(c, 0, 10)
		require.NoError(t, err)
		got := offsets(evs)
		if e.name == "lite" {
			assert.Equal(t, append(want, later), got)
		} else {
			assert.Equal(t, want, got, "a fresh store's ReadSince reads what was committed before the transaction began")
		}

		fresh = e.open(t)
		evs, err = fresh.Stream("proven").ReadFromConsumer(c, "new", 10)
		require.NoError(t, err)
		assert.Subset(t, offsets(evs), want, "a fresh store's ReadFromConsumer")
		assert.Len(t, offsets(evs), len(got))

		fresh = e.open(t)
		stats, err := fresh.Stats(c)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, stats.Horizon.Settled, want[2], "a fresh store's Stats")

		// A fresh store's receiver, safety poll an hour: the events come
		// from its first read, not from a poll after the holder ended.
		fresh = e.open(t)
		rx, err := fresh.Stream("proven").Subscribe(c, "rx", store.SubscribeOpts{SafetyPoll: time.Hour})
		require.NoError(t, err)
		defer rx.Close()
		rc, cancel := context.WithTimeout(c, 20*time.Second)
		defer cancel()
		for _, off := range want {
			ev, err := rx.Recv(rc)
			require.NoError(t, err)
			assert.Equal(t, off, ev.Offset, "a fresh store's receiver")
		}
		commit()
	})
}
