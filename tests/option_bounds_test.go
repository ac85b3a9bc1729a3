package tests

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/client"
	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

// WorkOpts' durations beyond 100 years are refused: the defaults add to
// and scale them (Visibility = Timeout + 30s, Timeout = 2/3 of a
// Visibility set alone) and a claim adds them to the clock, so near
// time.Duration's 292 years they overflowed. Before, a Visibility of 200
// years set alone gave every handler a context whose deadline was in
// 1965 (each attempt failed at once), and a Timeout of MaxInt64 made Work
// claim nothing, log nothing and return nil. 100 years set alone works.
func TestWorkRefusesDurationsThatWouldOverflow(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("long")
		const year = 365 * 24 * time.Hour
		for _, opts := range []store.WorkOpts{
			{Timeout: math.MaxInt64}, {Visibility: 200 * year}, {Visibility: math.MaxInt64},
			{Grace: 101 * year}, {PollInterval: math.MaxInt64},
		} {
			err := q.Work(c, opts, func(context.Context, *store.Job) error { return nil })
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", opts)
			assert.Contains(t, err.Error(), "longer than 100 years")
		}

		_, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		ran := make(chan error, 1)
		stop := runWork(t, q, store.WorkOpts{Visibility: 100 * year}, func(ctx context.Context, _ *store.Job) error {
			ran <- ctx.Err()
			return nil
		})
		require.NoError(t, <-ran, "a handler under a 100-year Visibility starts with a live context")
		stop()
	})
}

// A SubscribeOpts.Buffer above MaxSubscribeBuffer is refused: a receiver
// allocates its buffer up front, so math.MaxInt panicked in make ("makechan:
// size out of range") and 1<<40 ran the process out of memory, which no
// recover catches.
func TestSubscribeRefusesABufferTooLargeToAllocate(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("buf")
		for _, n := range []int{math.MaxInt, 1 << 40, store.MaxSubscribeBuffer + 1} {
			_, err := st.Subscribe(c, "c", store.SubscribeOpts{Buffer: n})
			require.ErrorIs(t, err, store.ErrInvalidArgument, "Subscribe, Buffer %d", n)
			_, err = st.Follow(c, 0, store.SubscribeOpts{Buffer: n})
			require.ErrorIs(t, err, store.ErrInvalidArgument, "Follow, Buffer %d", n)
		}
		r, err := st.Subscribe(c, "c", store.SubscribeOpts{Buffer: store.MaxSubscribeBuffer})
		require.NoError(t, err)
		require.NoError(t, r.Close())
	})
}

// PartitionOpts out of range are refused on both engines (SQLite, which has
// no partitions, checks them too, so a configuration fails the same way on
// either). Before, on PostgreSQL a Size of MaxInt64 failed with a raw
// "bigint out of range", an Ahead of 1<<30 created partitions until the
// context ended, and negative values silently took the defaults.
func TestCreatePartitionsRefusesOptionsOutOfRange(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		for _, opts := range []store.PartitionOpts{
			{Size: -5}, {Ahead: -1}, {Size: math.MaxInt64, Ahead: 3}, {Size: 1, Ahead: 1 << 30},
		} {
			_, err := s.Maintenance().CreatePartitions(c, opts)
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", opts)
		}
		_, err := s.Maintenance().CreatePartitions(c, store.PartitionOpts{})
		require.NoError(t, err)
	})
}

// janitor.Opts.Partitions out of range fail the pass with ErrInvalidArgument
// but do not stop its other tasks: before, CreatePartitions ran first and
// its error ended the pass, so headless rows, compaction, tombstones,
// retention and job sweeps all stopped, on every pass, on SQLite too.
func TestJanitorWithBadPartitionOptsStillCleansUp(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := &offsetClock{}
		c := ctx(t)
		s := e.open(t, store.WithClock(clk.Now))
		st := s.Stream("kv")
		require.NoError(t, st.Configure(c, store.StreamConfig{Compacted: true, MinCompactionLag: time.Minute, TombstoneRetention: time.Minute}))
		for _, k := range []string{"a", "b", "c"} {
			_, err := st.PublishWithKey(c, k, []byte("v1"))
			require.NoError(t, err)
			_, err = st.PublishWithKey(c, k, nil)
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool {
			evs, err := st.ReadSince(c, 0, 10)
			require.NoError(t, err)
			return len(evs) == 6
		}, 30*time.Second, 10*time.Millisecond) // past the settled horizon
		clk.Advance(time.Hour)
		var tombs int64
		for _, p := range []store.PartitionOpts{{Ahead: -1}, {Size: -1}, {Ahead: 1001}} {
			r, err := countingJanitor(s, janitor.Opts{Partitions: p, BatchSize: 1}).RunOnce(c)
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", p)
			tombs += r.TombstonesDeleted
		}
		assert.EqualValues(t, 3, tombs, "the pass's other tasks ran")
		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		assert.Empty(t, evs)
	})
}

// client.Subscribe's buffer, like SubscribeOpts.Buffer, is a channel made up
// front: a huge one panicked in make ("makechan: size out of range") or
// ran the process out of memory. It has no error to return, so a buffer
// above store.MaxSubscribeBuffer takes that bound.
func TestClientSubscribeTakesAtMostTheBufferBound(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		cl := client.New(e.open(t), client.Opts{})
		for _, n := range []int{math.MaxInt, 1 << 40, store.MaxSubscribeBuffer + 1} {
			sub := cl.Subscribe(n)
			assert.Equal(t, store.MaxSubscribeBuffer, cap(sub.C()), "buffer %d", n)
			sub.Close()
		}
	})
}

// EnqueueOpts' times outside years 1 to 9999 are refused. SQLite stores a
// time as microseconds since 1970 in 64 bits: a RunAt in year 300000 wrapped
// into the far past and the job ran at once, and an ExpiresAt there made it
// expired before its first claim; PostgreSQL failed with a raw "timestamp
// out of range". The range's ends are kept as given.
func TestEnqueueRefusesTimesOutOfRange(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("far")
		for _, opts := range []store.EnqueueOpts{
			{RunAt: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)},
			{ExpiresAt: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)},
			{RunAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
			{ExpiresAt: time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC)},
		} {
			_, err := q.Enqueue(c, []byte("x"), opts)
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", opts)
			assert.Contains(t, err.Error(), "out of range (years 1 to 9999)")
			_, err = q.EnqueueMany(c, []store.NewJob{{Payload: []byte("ok")}, {Payload: []byte("x"), Opts: opts}})
			require.ErrorIs(t, err, store.ErrInvalidArgument, "EnqueueMany %+v", opts)
		}
		last := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
		later, err := q.Enqueue(c, []byte("later"), store.EnqueueOpts{RunAt: last})
		require.NoError(t, err)
		first := time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC)
		now, err := q.Enqueue(c, []byte("now"), store.EnqueueOpts{RunAt: first, ExpiresAt: last})
		require.NoError(t, err)
		j, err := q.Job(c, later)
		require.NoError(t, err)
		assert.True(t, j.RunAt.Equal(last), "RunAt kept: %v", j.RunAt)
		jobs, err := q.Claim(c, "w", 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 1, "only the job due in year 1 is claimable now")
		assert.Equal(t, now, jobs[0].ID)
		require.NotNil(t, jobs[0].ExpiresAt)
		assert.True(t, jobs[0].ExpiresAt.Equal(last), "ExpiresAt kept: %v", jobs[0].ExpiresAt)
	})
}

// A nil clock, codec or logger given to Open is the default: Open took them,
// and the first typed enqueue or claim panicked on the nil.
func TestOpenTakesNilOptionsAsTheDefaults(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t, store.WithClock(nil), store.WithCodec(nil), store.WithLogger(nil))
		c := ctx(t)
		jq := s.JobQueue[int]("nil-opts")
		_, err := jq.Enqueue(c, 7, store.EnqueueOpts{})
		require.NoError(t, err)
		jobs, err := s.Queue("nil-opts").Claim(c, "w", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		assert.Equal(t, "7", string(jobs[0].Payload), "encoded with the JSON codec")
		assert.WithinDuration(t, time.Now(), jobs[0].CreatedAt, time.Hour, "stamped by time.Now")
	})
}

// WorkOpts' positive durations shorter than a millisecond (a Visibility
// shorter than 500 ms, too short for its heartbeats to keep it under load:
// see store's minVisibility) are refused, naming the field and the bound: a
// time.Duration is nanoseconds, and Visibility: 5 meant as 5 s was a 5 ns
// lease (every handler started with its context done and its job died in
// milliseconds), PollInterval: 1 made an idle Work busy-poll (0.6-1.4 s
// of CPU in 2 s). The bounds themselves are accepted.
func TestWorkRefusesDurationsTooShortToMean(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		q := s.Queue("short")
		h := func(context.Context, *store.Job) error { return nil }
		for _, tc := range []struct {
			opts         store.WorkOpts
			field, least string
		}{
			{store.WorkOpts{Visibility: 5}, "Visibility", "500ms"},
			{store.WorkOpts{Visibility: 499 * time.Millisecond}, "Visibility", "500ms"},
			{store.WorkOpts{Timeout: 5}, "Timeout", "1ms"},
			{store.WorkOpts{Grace: 5}, "Grace", "1ms"},
			{store.WorkOpts{PollInterval: 1}, "PollInterval", "1ms"},
			{store.WorkOpts{PollInterval: time.Microsecond}, "PollInterval", "1ms"},
		} {
			_, err := q.NewWorker(tc.opts, h)
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", tc.opts)
			assert.Contains(t, err.Error(), tc.field+" ")
			assert.Contains(t, err.Error(), "shorter than "+tc.least)
			_, err = q.NewWorkerTx(tc.opts, func(context.Context, store.Tx, *store.Job) error { return nil })
			require.ErrorIs(t, err, store.ErrInvalidArgument, "WorkTx %+v", tc.opts)
		}
		w, err := q.NewWorker(store.WorkOpts{Visibility: 500 * time.Millisecond, Timeout: time.Millisecond,
			Grace: time.Millisecond, PollInterval: time.Millisecond}, h)
		require.NoError(t, err, "the bounds themselves are accepted")
		require.NotNil(t, w)
	})
}
