package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestEnqueueManySameOptionsReachEveryJob: a batch whose jobs all have the
// same options resolves and checks them once (issue 18); every job still
// gets them, and options that differ in any field, however little, still
// reach their own job. Equal options are written differently on purpose:
// RunAt and ExpiresAt at the same instant in other locations, headers as
// separate equal maps. Alone and inside the caller's transaction.
func TestEnqueueManySameOptionsReachEveryJob(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		q := s.Queue("same")
		at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
		exp := at.Add(time.Hour)
		east := time.FixedZone("east", 5*3600)
		opts := func(i int) store.EnqueueOpts {
			o := store.EnqueueOpts{Priority: 7, MaxAttempts: 3, RunAt: at, ExpiresAt: exp,
				Headers: map[string]string{"tenant": "a", "trace": "t1"}}
			if i%2 == 1 {
				o.RunAt, o.ExpiresAt = at.In(east), exp.In(east)
			}
			return o
		}
		check := func(what string, batch []store.NewJob, ids []int64) {
			t.Helper()
			require.Len(t, ids, len(batch), what)
			for i, id := range ids {
				j, err := q.Job(c, id)
				require.NoError(t, err, what)
				o := batch[i].Opts
				samePayload(t, batch[i].Payload, j.Payload, fmt.Sprintf("%s: job %d", what, i))
				assert.Equal(t, o.Priority, j.Priority, "%s: job %d", what, i)
				wantAttempts := o.MaxAttempts
				if wantAttempts == 0 {
					wantAttempts = store.DefaultMaxAttempts
				}
				assert.Equal(t, wantAttempts, j.MaxAttempts, "%s: job %d", what, i)
				if !o.RunAt.IsZero() {
					assert.True(t, o.RunAt.Equal(j.RunAt), "%s: job %d: run at %s, want %s", what, i, j.RunAt, o.RunAt)
				} else if o.Delay != 0 {
					assert.WithinDuration(t, time.Now().Add(o.Delay), j.RunAt, time.Minute, "%s: job %d", what, i)
				}
				if o.ExpiresAt.IsZero() {
					assert.Nil(t, j.ExpiresAt, "%s: job %d", what, i)
				} else if assert.NotNil(t, j.ExpiresAt, "%s: job %d", what, i) {
					assert.True(t, o.ExpiresAt.Equal(*j.ExpiresAt), "%s: job %d: expires at %s, want %s", what, i, *j.ExpiresAt, o.ExpiresAt)
				}
				if len(o.Headers) == 0 {
					assert.Empty(t, j.Headers, "%s: job %d", what, i)
				} else {
					assert.Equal(t, o.Headers, j.Headers, "%s: job %d", what, i)
				}
			}
		}
		enqueue := func(what string, batch []store.NewJob) {
			t.Helper()
			ids, err := q.EnqueueMany(c, batch)
			require.NoError(t, err, what)
			check(what, batch, ids)
			require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
				ids, err = q.EnqueueManyTx(ctx, tx, batch)
				return err
			}), what)
			check(what+" in a Tx", batch, ids)
		}
		build := func(n int, opts func(i int) store.EnqueueOpts) []store.NewJob {
			batch := make([]store.NewJob, n)
			for i := range batch {
				batch[i] = store.NewJob{Payload: fmt.Appendf(nil, "job %d", i), Opts: opts(i)}
			}
			return batch
		}

		enqueue("the same options", build(40, opts))
		shared := map[string]string{"tenant": "b"}
		enqueue("one headers map", build(40, func(int) store.EnqueueOpts {
			return store.EnqueueOpts{Delay: time.Hour, Headers: shared}
		}))
		enqueue("no options", build(40, func(int) store.EnqueueOpts { return store.EnqueueOpts{} }))
		enqueue("nil and empty headers", build(40, func(i int) store.EnqueueOpts {
			if i%2 == 0 {
				return store.EnqueueOpts{Headers: map[string]string{}}
			}
			return store.EnqueueOpts{}
		}))
		enqueue("one job", build(1, opts))

		// The last job differs from the others in one field each time.
		for name, change := range map[string]func(*store.EnqueueOpts){
			"a header's value":  func(o *store.EnqueueOpts) { o.Headers = map[string]string{"tenant": "a", "trace": "t2"} },
			"a header's name":   func(o *store.EnqueueOpts) { o.Headers = map[string]string{"tenant": "a", "trace2": "t1"} },
			"one header more":   func(o *store.EnqueueOpts) { o.Headers["x"] = "y" },
			"no headers":        func(o *store.EnqueueOpts) { o.Headers = nil },
			"priority":          func(o *store.EnqueueOpts) { o.Priority++ },
			"max attempts":      func(o *store.EnqueueOpts) { o.MaxAttempts++ },
			"run at, by 1µs":    func(o *store.EnqueueOpts) { o.RunAt = o.RunAt.Add(time.Microsecond) },
			"expires, by 1µs":   func(o *store.EnqueueOpts) { o.ExpiresAt = o.ExpiresAt.Add(time.Microsecond) },
			"never expiring":    func(o *store.EnqueueOpts) { o.ExpiresAt = time.Time{} },
			"a delay, no RunAt": func(o *store.EnqueueOpts) { o.RunAt, o.Delay = time.Time{}, time.Hour },
		} {
			batch := build(20, opts)
			change(&batch[19].Opts)
			enqueue("the last job's "+name, batch)
		}
	})
}

// TestEnqueueManySameOptionsRefusedInOrder: a batch whose jobs share
// options is refused as any batch is, in the same order: the first job's
// payload, then the options (named as the first job's, whichever job
// would have been checked), then each other job's payload; nothing is
// stored.
func TestEnqueueManySameOptionsRefusedInOrder(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t, store.WithMaxPayloadSize(16))
		q := s.Queue("refused")
		big := make([]byte, 17)
		batch := func(opts store.EnqueueOpts, bigAt ...int) []store.NewJob {
			jobs := make([]store.NewJob, 10)
			for i := range jobs {
				jobs[i] = store.NewJob{Payload: []byte("ok"), Opts: opts}
			}
			for _, i := range bigAt {
				jobs[i].Payload = big
			}
			return jobs
		}
		bad := store.EnqueueOpts{Priority: 1 << 31}
		_, err := q.EnqueueMany(c, batch(bad, 0))
		assert.ErrorIs(t, err, store.ErrPayloadTooLarge, "job 0's payload comes first")
		assert.ErrorContains(t, err, "job 0's payload")
		_, err = q.EnqueueMany(c, batch(bad, 3))
		assert.ErrorIs(t, err, store.ErrInvalidArgument, "then the options")
		assert.ErrorContains(t, err, "job 0: ")
		_, err = q.EnqueueMany(c, batch(store.EnqueueOpts{Priority: 1}, 3, 7))
		assert.ErrorIs(t, err, store.ErrPayloadTooLarge)
		assert.ErrorContains(t, err, "job 3's payload")
		for name, o := range map[string]store.EnqueueOpts{
			"negative MaxAttempts":  {MaxAttempts: -1},
			"negative Delay":        {Delay: -time.Second},
			"RunAt and Delay":       {RunAt: time.Now(), Delay: time.Second},
			"a header without name": {Headers: map[string]string{"": "x"}},
		} {
			_, err = q.EnqueueMany(c, batch(o))
			assert.ErrorIs(t, err, store.ErrInvalidArgument, name)
			assert.ErrorContains(t, err, "job 0: ", name)
		}
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.Zero(t, st.Ready+st.Scheduled, "nothing was stored")
	})
}

// TestEnqueueManyUnderEveryQueryExecMode (PostgreSQL): a batch of jobs
// alike but for their payloads, whose payloads the store hands pgx as an
// array of its own (not a [][]byte) and whose ids it reads from their
// binary form, goes in and comes back the same whatever query mode the
// application's pool uses: with the parameter's type known (prepared or
// described), or not (QueryExecModeExec, the simple protocol, where the
// ids come back as text).
func TestEnqueueManyUnderEveryQueryExecMode(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	eachExecMode(t, e, func(t *testing.T, s *store.Store, _ *pgxpool.Pool, mode pgx.QueryExecMode) {
		c := ctx(t)
		q := s.Queue("mode-" + mode.String())
		payloads := [][]byte{[]byte("a"), nil, {}, {0, 0xff, '\\', '"', '{', ','}, []byte("NULL"), []byte(`\x00`)}
		jobs := make([]store.NewJob, len(payloads))
		for i, p := range payloads {
			jobs[i] = store.NewJob{Payload: p, Opts: store.EnqueueOpts{Priority: 2}}
		}
		for round := range 2 { // the second on a prepared statement, where the mode prepares
			ids, err := q.EnqueueMany(c, jobs)
			require.NoError(t, err, "round %d", round)
			require.Len(t, ids, len(jobs))
			for i, id := range ids {
				if i > 0 {
					assert.Greater(t, id, ids[i-1])
				}
				j, err := q.Job(c, id)
				require.NoError(t, err)
				samePayload(t, payloads[i], j.Payload, fmt.Sprintf("round %d, job %d", round, i))
				assert.Equal(t, 2, j.Priority)
			}
		}
	})
}

// TestABatchsJobIsStoredAsAJobEnqueuedAlone: a job of an EnqueueMany batch
// (every job with the same options) is stored as the same row, column by
// column (all but its id), as the same job enqueued on its own, whose
// statement names every column. On SQLite a batch without options is
// inserted by a statement that leaves the priority, max attempts (schema
// 00038's DEFAULT 25), expiry and headers to the columns' defaults
// (EnqueueJobsPlainCounted); each option set alone
// must still take the statement that names them. Alone and in the caller's
// transaction; the store's clock is fixed, so the times are equal too.
func TestABatchsJobIsStoredAsAJobEnqueuedAlone(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		now := time.Now().Truncate(time.Microsecond)
		s := e.open(t, store.WithClock(func() time.Time { return now }))
		q := s.Queue("alone")
		db := e.sqlDB(t)
		table := "alk_jobs"
		if e.name == "pg" {
			table = "alkstore.jobs"
		}
		row := func(id int64) map[string]any {
			t.Helper()
			rows, err := db.QueryContext(c, fmt.Sprintf(`SELECT * FROM %s WHERE id = %d`, table, id))
			require.NoError(t, err)
			defer rows.Close()
			cols, err := rows.Columns()
			require.NoError(t, err)
			require.True(t, rows.Next(), "job %d", id)
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			require.NoError(t, rows.Scan(ptrs...))
			require.NoError(t, rows.Err())
			m := map[string]any{}
			for i, col := range cols {
				if col != "id" {
					m[col] = vals[i]
				}
			}
			return m
		}
		for _, o := range []struct {
			what string
			opts store.EnqueueOpts
		}{
			{"no options", store.EnqueueOpts{}},
			{"priority", store.EnqueueOpts{Priority: 5}},
			{"negative priority", store.EnqueueOpts{Priority: -1}},
			{"expiry", store.EnqueueOpts{ExpiresAt: now.Add(time.Hour)}},
			{"headers", store.EnqueueOpts{Headers: map[string]string{"tenant": "a"}}},
			{"max attempts", store.EnqueueOpts{MaxAttempts: 3}},
			{"run at", store.EnqueueOpts{RunAt: now.Add(time.Minute)}},
		} {
			alone, err := q.Enqueue(c, []byte("job"), o.opts)
			require.NoError(t, err, o.what)
			want := row(alone)
			batch := []store.NewJob{{Payload: []byte("job"), Opts: o.opts}, {Payload: []byte("job"), Opts: o.opts}, {Payload: []byte("job"), Opts: o.opts}}
			ids, err := q.EnqueueMany(c, batch)
			require.NoError(t, err, o.what)
			require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
				more, err := q.EnqueueManyTx(ctx, tx, batch)
				ids = append(ids, more...)
				return err
			}), o.what)
			require.Len(t, ids, 2*len(batch), o.what)
			for i, id := range ids {
				assert.Equal(t, want, row(id), "%s: job %d of the batches", o.what, i)
			}
		}
	})
}
