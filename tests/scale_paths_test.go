package tests

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// Behaviour of the index-driven maintenance passes and the capped Stats
// (issue 12); their plans are checked in plans_test.go.

// cutClock reads real time until set, then a fixed moment: events take
// their created_at from the database's clock, so a test records a moment
// between two sets of events and places the cut-off there.
type cutClock struct{ at atomic.Pointer[time.Time] }

func (c *cutClock) Now() time.Time {
	if t := c.at.Load(); t != nil {
		return *t
	}
	return time.Now()
}
func (c *cutClock) Set(t time.Time) { c.at.Store(&t) }

// drainPass calls a pass until it returns less than batch, checking no call
// returns more, and returns the counts of each call.
func drainPass(t *testing.T, c context.Context, pass func(context.Context, int) (int64, error), batch int) []int64 {
	t.Helper()
	var counts []int64
	for {
		n, err := pass(c, batch)
		require.NoError(t, err)
		require.LessOrEqual(t, n, int64(batch), "a pass changes at most its batch")
		counts = append(counts, n)
		if n < int64(batch) {
			return counts
		}
	}
}

func sum(ns []int64) (s int64) {
	for _, n := range ns {
		s += n
	}
	return s
}

func msgs(n int, key func(i int) *string, payload string) []store.Message {
	out := make([]store.Message, n)
	for i := range out {
		out[i] = store.Message{Key: key(i), Payload: []byte(payload)}
	}
	return out
}

func keyN(prefix string) func(int) *string {
	return func(i int) *string { k := fmt.Sprintf("%s%d", prefix, i); return &k }
}

func noKey(int) *string { return nil }

// TestRetentionWalksFromTheOldest: ApplyRetention deletes, in batches of
// at most its batch, every event older than the retention and none newer;
// on a stream that is not compacted the head it deletes becomes headless;
// on a compacted one, the 600 old heads at the front of the stream (more
// than a batch) are spared and do not stop it from reaching the old events
// behind them.
func TestRetentionWalksFromTheOldest(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := &cutClock{}
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		plain, comp := s.Stream("plain"), s.Stream("comp")
		require.NoError(t, plain.Configure(c, store.StreamConfig{Retention: time.Hour}))
		require.NoError(t, comp.Configure(c, store.StreamConfig{Compacted: true, Retention: time.Hour}))

		_, err := plain.PublishMany(c, msgs(1199, noKey, "old"))
		require.NoError(t, err)
		_, err = plain.PublishWithKey(c, "k", []byte("old"))
		require.NoError(t, err)
		_, err = comp.PublishMany(c, msgs(600, keyN("k"), "old head"))
		require.NoError(t, err)
		_, err = comp.PublishMany(c, msgs(300, noKey, "old"))
		require.NoError(t, err)
		mid := time.Now()
		// SQLite's created_at has millisecond precision: the next events'
		// must be past mid, not in its millisecond.
		time.Sleep(2 * time.Millisecond)
		_, err = plain.PublishMany(c, msgs(10, noKey, "new"))
		require.NoError(t, err)
		_, err = comp.PublishMany(c, msgs(5, noKey, "new"))
		require.NoError(t, err)
		clk.Set(mid.Add(time.Hour)) // the cut-off is mid

		counts := drainPass(t, c, s.Maintenance().ApplyRetention, 500)
		assert.EqualValues(t, 1200+300, sum(counts), "every old event but the compacted heads (passes: %v)", counts)
		assert.EqualValues(t, 500, counts[0], "the first pass stops at its batch")

		left := func(st *store.Stream) map[string]int {
			evs, err := st.ReadSince(c, 0, 5000)
			require.NoError(t, err)
			m := map[string]int{}
			for _, ev := range evs {
				m[string(ev.Payload)]++
			}
			return m
		}
		assert.Equal(t, map[string]int{"new": 10}, left(plain))
		assert.Equal(t, map[string]int{"new": 5, "old head": 600}, left(comp))
		stats, err := s.Stats(c)
		require.NoError(t, err)
		for _, st := range stats.Streams {
			if st.Name == "plain" {
				assert.Zero(t, st.Keys, "the deleted head's key has no head")
				assert.EqualValues(t, 1, st.Headless, "it is headless")
			}
		}
		n, err := s.Maintenance().ApplyRetention(c, 500)
		require.NoError(t, err)
		assert.Zero(t, n, "nothing is left past retention")
	})
}

// TestCompactionWalksEachEventOnce: CompactSuperseded deletes each key's
// versions older than its head, including versions it walked past while
// they were heads (below its cursor), keeps unkeyed events, and stays
// within its batch.
func TestCompactionWalksEachEventOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("kv")
		require.NoError(t, st.Configure(c, store.StreamConfig{Compacted: true}))
		compact := s.Maintenance().CompactSuperseded

		_, err := st.PublishMany(c, append(msgs(100, keyN("k"), "v1"), msgs(5, noKey, "plain")...))
		require.NoError(t, err)
		assert.Equal(t, []int64{0}, drainPass(t, c, compact, 500), "nothing is superseded yet")

		_, err = st.PublishMany(c, msgs(100, keyN("k"), "v2"))
		require.NoError(t, err)
		assert.Equal(t, []int64{30, 30, 30, 10}, drainPass(t, c, compact, 30),
			"the first versions, walked while they were heads, go when their keys' next versions are walked")

		for _, v := range []string{"v3", "v4"} {
			_, err = st.PublishWithKey(c, "k7", []byte(v))
			require.NoError(t, err)
		}
		assert.EqualValues(t, 2, sum(drainPass(t, c, compact, 500)))

		evs, err := st.ReadSince(c, 0, 1000)
		require.NoError(t, err)
		got := map[string]int{}
		for _, ev := range evs {
			got[string(ev.Payload)]++
		}
		assert.Equal(t, map[string]int{"plain": 5, "v2": 99, "v4": 1}, got)
		assert.Equal(t, []int64{0}, drainPass(t, c, compact, 500))
	})
}

// TestStatsCountsStopAtTheLimit: Stats and Queue.Stats count up to
// StatsCountLimit and no further; the head offset and smaller counts are
// exact.
func TestStatsCountsStopAtTheLimit(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		many, few := s.Stream("many"), s.Stream("few")
		var last int64
		for left := store.StatsCountLimit + 5; left > 0; left -= 1000 {
			ids, err := many.PublishMany(c, msgs(min(left, 1000), noKey, "x"))
			require.NoError(t, err)
			last = ids[len(ids)-1]
		}
		_, err := few.PublishMany(c, msgs(3, noKey, "x"))
		require.NoError(t, err)
		require.NoError(t, many.SaveOffset(c, "c", 1))
		q := s.Queue("busy")
		for left := store.StatsCountLimit + 1; left > 0; left -= 1000 {
			jobs := make([]store.NewJob, min(left, 1000))
			_, err := q.EnqueueMany(c, jobs)
			require.NoError(t, err)
		}
		_, err = s.Queue("quiet").Enqueue(c, nil, store.EnqueueOpts{RunAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)

		stats, err := s.Stats(c)
		require.NoError(t, err)
		require.Len(t, stats.Streams, 2)
		assert.Equal(t, "few", stats.Streams[0].Name)
		assert.EqualValues(t, 3, stats.Streams[0].Events)
		assert.Equal(t, "many", stats.Streams[1].Name)
		assert.EqualValues(t, store.StatsCountLimit, stats.Streams[1].Events, "capped")
		assert.Equal(t, last, stats.Streams[1].HeadOffset, "exact")
		require.Len(t, stats.Streams[1].Consumers, 1)
		assert.EqualValues(t, store.StatsCountLimit, stats.Streams[1].Consumers[0].Lag, "capped")
		require.Len(t, stats.Queues, 2)
		assert.Equal(t, "busy", stats.Queues[0].Queue)
		assert.EqualValues(t, store.StatsCountLimit, stats.Queues[0].Ready, "capped")
		assert.Equal(t, store.NamedQueueStats{Queue: "quiet", QueueStats: store.QueueStats{Scheduled: 1}}, stats.Queues[1])
		qs, err := q.Stats(c)
		require.NoError(t, err)
		assert.EqualValues(t, store.StatsCountLimit, qs.Ready)
		assert.Positive(t, qs.OldestReady)
	})
}
