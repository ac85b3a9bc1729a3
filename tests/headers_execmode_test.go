package tests

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestHeadersUnderEveryQueryExecMode: every write that carries headers
// stores them, and they come back on Job and on the stream's events,
// whatever query mode the application's pool uses. Under
// QueryExecModeExec and the simple protocol (PgBouncer's usual settings)
// pgx does not know a parameter's type and sends a Go []byte as bytea
// ("\x7b..."), which a jsonb parameter refused (SQLSTATE 22P02): the
// store hands pgx the headers' JSON as text. Covered: Enqueue, an
// EnqueueMany batch alike (headers bound once) and a mixed one (headers
// as an array), a unique job, PublishMessage unkeyed and keyed, the Tx
// forms in the store's own and in an adopted transaction, a schedule's
// headers (Set, Info, Trigger), and a batch ack. SQLite runs the same
// calls once.
func TestHeadersUnderEveryQueryExecMode(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		if e.name != "pg" {
			headersRoundTrip(t, e.open(t), nil, "hdr")
			return
		}
		eachExecMode(t, e, func(t *testing.T, s *store.Store, pool *pgxpool.Pool, mode pgx.QueryExecMode) {
			headersRoundTrip(t, s, pool, "hdr-"+mode.String()) // a mode's own names: one mode's failure leaves the next alone
		})
	})
}

// headersRoundTrip writes with headers through s (and, when pool is not
// nil, through a transaction of pool that s adopts) and reads them back,
// on the queue, stream and schedule called name.
func headersRoundTrip(t *testing.T, s *store.Store, pool *pgxpool.Pool, name string) {
	c := ctx(t)
	h := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"tenant": `a"b\c {é} \x7b`}
	h2 := map[string]string{"k": "v"}
	q, st := s.Queue(name), s.Stream(name)
	for round := range 2 { // the second on prepared statements, where the mode prepares
		want := map[int64]map[string]string{}
		id, err := q.Enqueue(c, []byte("one"), store.EnqueueOpts{Headers: h})
		require.NoError(t, err, "round %d: Enqueue", round)
		want[id] = h
		id, err = q.Enqueue(c, []byte("unique"), store.EnqueueOpts{Headers: h2,
			Unique: store.UniqueOpts{Key: "u" + string(rune('0'+round))}})
		require.NoError(t, err, "round %d: Enqueue unique", round)
		want[id] = h2
		ids, err := q.EnqueueMany(c, []store.NewJob{{Payload: []byte("a"), Opts: store.EnqueueOpts{Headers: h}},
			{Payload: []byte("b"), Opts: store.EnqueueOpts{Headers: h}}, {Opts: store.EnqueueOpts{Headers: h}}})
		require.NoError(t, err, "round %d: EnqueueMany alike", round)
		for _, id := range ids {
			want[id] = h
		}
		ids, err = q.EnqueueMany(c, []store.NewJob{{Payload: []byte("a"), Opts: store.EnqueueOpts{Headers: h}},
			{Payload: []byte("b"), Opts: store.EnqueueOpts{Headers: h2}}, {Payload: []byte("c")}})
		require.NoError(t, err, "round %d: EnqueueMany mixed", round)
		want[ids[0]], want[ids[1]], want[ids[2]] = h, h2, nil

		wantEv := map[int64]map[string]string{}
		off, err := st.PublishMessage(c, store.Message{Payload: []byte("e"), Headers: h})
		require.NoError(t, err, "round %d: PublishMessage", round)
		wantEv[off] = h
		key := "k"
		off, err = st.PublishMessage(c, store.Message{Key: &key, Payload: []byte("k"), Headers: h2})
		require.NoError(t, err, "round %d: keyed PublishMessage", round)
		wantEv[off] = h2

		inTx := func(tx store.Tx) {
			id, err := q.EnqueueTx(c, tx, []byte("tx"), store.EnqueueOpts{Headers: h})
			require.NoError(t, err, "round %d: EnqueueTx", round)
			want[id] = h
			ids, err := q.EnqueueManyTx(c, tx, []store.NewJob{{Opts: store.EnqueueOpts{Headers: h2}},
				{Opts: store.EnqueueOpts{Headers: h2}}})
			require.NoError(t, err, "round %d: EnqueueManyTx", round)
			want[ids[0]], want[ids[1]] = h2, h2
			off, err := st.PublishMessageTx(c, tx, store.Message{Payload: []byte("tx"), Headers: h})
			require.NoError(t, err, "round %d: PublishMessageTx", round)
			wantEv[off] = h
			off, err = st.PublishMessageTx(c, tx, store.Message{Key: &key, Payload: []byte("tx"), Headers: h2})
			require.NoError(t, err, "round %d: keyed PublishMessageTx", round)
			wantEv[off] = h2
		}
		require.NoError(t, s.InTx(c, func(_ context.Context, tx store.Tx) error { inTx(tx); return nil }))
		if pool != nil {
			ptx, err := pool.Begin(c)
			require.NoError(t, err)
			tx, err := s.AdoptPgx(ptx)
			require.NoError(t, err)
			inTx(tx)
			require.NoError(t, ptx.Commit(c))
		}

		sc := s.Schedule(name)
		require.NoError(t, sc.Set(c, store.ScheduleSpec{Spec: "@daily", Queue: name, Headers: h}), "round %d: Set", round)
		info, err := sc.Info(c)
		require.NoError(t, err)
		assert.Equal(t, h, info.Headers, "round %d: schedule", round)
		id, err = sc.Trigger(c)
		require.NoError(t, err, "round %d: Trigger", round)
		want[id] = h

		for id, hs := range want {
			j, err := q.Job(c, id)
			require.NoError(t, err)
			assert.Equal(t, hs, j.Headers, "round %d, job %d (%s)", round, id, j.Payload)
		}
		evs, err := st.ReadSince(c, 0, 1000)
		require.NoError(t, err)
		seen := 0
		for _, ev := range evs {
			if hs, ok := wantEv[ev.Offset]; ok {
				seen++
				assert.Equal(t, hs, ev.Headers, "round %d, event %d", round, ev.Offset)
			}
		}
		assert.Equal(t, len(wantEv), seen, "round %d: events read", round)

		jobs, err := q.Claim(c, "w", len(want), time.Minute)
		require.NoError(t, err, "round %d: Claim", round)
		require.Len(t, jobs, len(want), "round %d", round)
		for _, j := range jobs {
			assert.Equal(t, want[j.ID], j.Headers, "round %d, claimed job %d", round, j.ID)
		}
		n, err := q.AckMany(c, jobs)
		require.NoError(t, err, "round %d: AckMany", round)
		assert.EqualValues(t, len(jobs), n, "round %d", round)
	}
}

// eachExecMode runs f as a subtest for each of pgx's query modes, with a
// store opened on an application pool (OpenPool) whose connections use
// that mode: prepared or described statements, or none (QueryExecModeExec,
// the simple protocol: a pooler in transaction mode may need them).
func eachExecMode(t *testing.T, e *engineEnv, f func(t *testing.T, s *store.Store, pool *pgxpool.Pool, mode pgx.QueryExecMode)) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			c := ctx(t)
			cfg, err := pgxpool.ParseConfig(e.dsn)
			require.NoError(t, err)
			cfg.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(c, cfg)
			require.NoError(t, err)
			s, err := store.OpenPool(c, pool)
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close(); pool.Close() })
			f(t, s, pool, mode)
		})
	}
}
