package tests

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pgdb "github.com/alkstore/alkstore/db/pg"
	"github.com/alkstore/alkstore/store"
)

// TestReadEventsCutsAtTheBestCandidateItsSnapshotProves: PostgreSQL's page
// statements cut at the greatest head among the candidates sent whose next
// the statement's own snapshot's xmin reaches (a next equal to xmin
// included), or at the floor when that is greater; the candidates ascend
// (store/horizon.go) and the statement finds the best by a binary search
// (width_bucket), so each case puts nexts on both sides of xmin, on it, all
// below, all above, none, and 128 of them. The expected horizon comes from
// a plain loop over the candidates and the xmin the statement reports, so
// the case holds however far other transactions move xmin meanwhile.
// SQLite has no horizon.
func TestReadEventsCutsAtTheBestCandidateItsSnapshotProves(t *testing.T) {
	e := newEnv(t, "pg")
	s := e.open(t)
	c := ctx(t)
	const events = 200
	for range events / 100 {
		msgs := make([]store.Message, 100)
		for i := range msgs {
			msgs[i] = store.Message{Payload: []byte("p")}
		}
		_, err := s.Stream("proof").PublishMany(c, msgs)
		require.NoError(t, err)
	}
	var ids []int64
	rows, err := e.pool(t).Query(c, `SELECT id FROM alkstore.events WHERE stream = 'proof' ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, events)
	q := pgdb.New(e.pool(t))
	xminNow := func() int64 {
		var x int64
		require.NoError(t, e.pool(t).QueryRow(c, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`).Scan(&x))
		return x
	}
	// cands turns ascending offsets from xmin into nexts, with heads the
	// stream's first events in order.
	cands := func(x int64, offs ...int64) (nexts, heads []int64) {
		for i, o := range offs {
			nexts, heads = append(nexts, x+o), append(heads, ids[i])
		}
		return nexts, heads
	}
	many := make([]int64, 128)
	for i := range many {
		many[i] = int64(i) - 64
	}
	cases := []struct {
		name  string
		floor int64
		offs  []int64
	}{
		{"none", 0, nil},
		{"none, a floor", ids[4], nil},
		{"both sides", 0, []int64{-30, -20, -10, 10, 20}},
		{"one on xmin", 0, []int64{-3, 0, 5}},
		{"all below", 0, []int64{-9, -5, -1}},
		{"all above", 0, []int64{1, 2, 3}},
		{"the floor above the proven", ids[150], []int64{-2, -1, 4}},
		{"128", 0, many},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nexts, heads := cands(xminNow(), tc.offs...)
			if nexts == nil {
				nexts, heads = []int64{}, []int64{}
			}
			rows, err := q.ReadEvents(c, pgdb.ReadEventsParams{Stream: "proof", After: 0, Lim: events + 10,
				Floor: tc.floor, Nexts: nexts, Heads: heads, Learn: false})
			require.NoError(t, err)
			require.NotEmpty(t, rows)
			snap, err := pgdb.ParsePageSnapshot(rows[0].Snapshot, false)
			require.NoError(t, err)
			require.Zero(t, rows[0].ID, "the first row carries the snapshot alone")
			for _, r := range rows[1:] {
				require.Nil(t, r.Snapshot, "only the first row carries the statement's snapshot")
			}
			xmin := snap.Xmin
			want := tc.floor
			for i, n := range nexts {
				if n <= xmin {
					want = max(want, heads[i])
				}
			}
			assert.Equal(t, want, snap.Horizon, "xmin %d, nexts %v", xmin, nexts)
			var got, page []int64
			for _, r := range rows {
				if r.ID != 0 {
					got = append(got, r.ID)
				}
			}
			for _, id := range ids {
				if id <= want {
					page = append(page, id)
				}
			}
			assert.Equal(t, fmt.Sprint(page), fmt.Sprint(got), "the page is the stream's events up to the horizon")
		})
	}
}
