package tests

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// seenInsert is what a recording middleware saw of one insert.
type seenInsert struct {
	kind  store.InsertKind
	name  string
	batch bool
	tx    bool
	ids   []int64
	err   error
}

type insertRecorder struct {
	mu   sync.Mutex
	seen []seenInsert
}

func (r *insertRecorder) middleware(next store.InsertFunc) store.InsertFunc {
	return func(ctx context.Context, in *store.Insert) error {
		for i := range in.Messages {
			in.Messages[i].SetHeader("mw", in.Name)
		}
		err := next(ctx, in)
		s := seenInsert{kind: in.Kind, name: in.Name, batch: in.Batch, tx: in.Tx, err: err}
		for _, m := range in.Messages {
			s.ids = append(s.ids, m.ID)
		}
		r.mu.Lock()
		r.seen = append(r.seen, s)
		r.mu.Unlock()
		return err
	}
}

func (r *insertRecorder) take() []seenInsert {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.seen
	r.seen = nil
	return out
}

// Insert middleware sees every publish and enqueue form once, with its
// kind, name, batch and transaction flags and, after the write, the ids;
// a header it sets is stored, and the caller's map is left alone.
func TestInsertMiddlewareSeesEveryForm(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		rec := &insertRecorder{}
		s := e.open(t, store.WithInsertMiddleware(rec.middleware))
		st, q := s.Stream("ev"), s.Queue("jobs")
		mine := map[string]string{"caller": "yes"}
		k := "k"
		expect := func(form string, kind store.InsertKind, name string, batch, tx bool, ids ...int64) {
			t.Helper()
			seen := rec.take()
			require.Len(t, seen, 1, form)
			assert.Equal(t, seenInsert{kind: kind, name: name, batch: batch, tx: tx, ids: ids}, seen[0], form)
		}
		pub := store.InsertPublish
		off, err := st.Publish(c, []byte("a"))
		require.NoError(t, err)
		expect("Publish", pub, "ev", false, false, off)
		off, err = st.PublishWithKey(c, "k", []byte("b"))
		require.NoError(t, err)
		expect("PublishWithKey", pub, "ev", false, false, off)
		off, err = st.PublishMessage(c, store.Message{Payload: []byte("c"), Headers: mine})
		require.NoError(t, err)
		expect("PublishMessage", pub, "ev", false, false, off)
		offs, err := st.PublishMany(c, []store.Message{{Payload: []byte("d")}, {Key: &k, Payload: []byte("e"), Headers: mine}})
		require.NoError(t, err)
		expect("PublishMany", pub, "ev", true, false, offs...)
		v := "typed"
		off, err = s.Topic[string]("ev").Publish(c, &v, store.PublishOpts{Key: "tk"})
		require.NoError(t, err)
		expect("Topic.Publish", pub, "ev", false, false, off)

		enq := store.InsertEnqueue
		id, err := q.Enqueue(c, []byte("j"), store.EnqueueOpts{Headers: mine})
		require.NoError(t, err)
		expect("Enqueue", enq, "jobs", false, false, id)
		ids, err := q.EnqueueMany(c, []store.NewJob{{Payload: []byte("j1")}, {Payload: []byte("j2")}})
		require.NoError(t, err)
		expect("EnqueueMany", enq, "jobs", true, false, ids...)
		u, err := q.EnqueueUnique(c, []byte("u"), store.EnqueueOpts{Unique: store.UniqueOpts{Key: "u"}})
		require.NoError(t, err)
		expect("EnqueueUnique", enq, "jobs", false, false, u.ID)
		dup, err := q.EnqueueUnique(c, []byte("u again"), store.EnqueueOpts{Unique: store.UniqueOpts{Key: "u"}})
		require.NoError(t, err)
		require.True(t, dup.Duplicate)
		expect("EnqueueUnique duplicate", enq, "jobs", false, false, u.ID)
		us, err := q.EnqueueManyUnique(c, []store.NewJob{{Opts: store.EnqueueOpts{Unique: store.UniqueOpts{Key: "u2"}}}})
		require.NoError(t, err)
		expect("EnqueueManyUnique", enq, "jobs", true, false, us[0].ID)
		id, err = s.JobQueue[string]("jobs").Enqueue(c, "typed", store.EnqueueOpts{})
		require.NoError(t, err)
		expect("JobQueue.Enqueue", enq, "jobs", false, false, id)
		ob := s.Outbox("hooks")
		id, err = ob.Enqueue(c, []byte("o"), store.EnqueueOpts{})
		require.NoError(t, err)
		expect("Outbox.Enqueue", enq, ob.QueueName(), false, false, id)

		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			off, err := st.PublishTx(c, tx, []byte("t"))
			require.NoError(t, err)
			expect("PublishTx", pub, "ev", false, true, off)
			offs, err := st.PublishManyTx(c, tx, []store.Message{{Payload: []byte("tm")}})
			require.NoError(t, err)
			expect("PublishManyTx", pub, "ev", true, true, offs...)
			off, err = st.PublishWithKeyTx(c, tx, "k", []byte("tk"))
			require.NoError(t, err)
			expect("PublishWithKeyTx", pub, "ev", false, true, off)
			id, err := q.EnqueueTx(c, tx, []byte("tj"), store.EnqueueOpts{})
			require.NoError(t, err)
			expect("EnqueueTx", enq, "jobs", false, true, id)
			ids, err := q.EnqueueManyTx(c, tx, []store.NewJob{{Payload: []byte("tj1")}})
			require.NoError(t, err)
			expect("EnqueueManyTx", enq, "jobs", true, true, ids...)
			id, err = ob.EnqueueTx(c, tx, []byte("to"), store.EnqueueOpts{})
			require.NoError(t, err)
			expect("Outbox.EnqueueTx", enq, ob.QueueName(), false, true, id)
			return nil
		}))

		assert.Equal(t, map[string]string{"caller": "yes"}, mine, "the caller's map is never changed")
		evs, err := st.ReadSince(c, 0, 100)
		require.NoError(t, err)
		require.NotEmpty(t, evs)
		for _, ev := range evs {
			assert.Equal(t, "ev", ev.Headers["mw"], "event %d", ev.Offset)
		}
		jobs, err := q.Claim(c, "w", 100, 60e9)
		require.NoError(t, err)
		require.NotEmpty(t, jobs)
		for _, j := range jobs {
			assert.Equal(t, "jobs", j.Headers["mw"], "job %d", j.ID)
			if string(j.Payload) == "j" {
				assert.Equal(t, map[string]string{"caller": "yes", "mw": "jobs"}, j.Headers)
			}
		}
	})
}

// A middleware's error stops the write and reaches the caller; headers it
// adds are checked against the bound after it ran; a nil middleware is
// refused at Open.
func TestInsertMiddlewareErrorsAndBounds(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		errVeto := errors.New("veto")
		veto := func(next store.InsertFunc) store.InsertFunc {
			return func(ctx context.Context, in *store.Insert) error {
				if string(in.Messages[0].Payload) == "veto" {
					return errVeto
				}
				if string(in.Messages[0].Payload) == "huge" {
					in.Messages[0].SetHeader("big", strings.Repeat("x", store.MaxHeadersSize))
				}
				if string(in.Messages[0].Payload) == "drop" {
					in.Messages = in.Messages[:0]
				}
				return next(ctx, in)
			}
		}
		s := e.open(t, store.WithInsertMiddleware(veto))
		st, q := s.Stream("ev"), s.Queue("jobs")
		_, err := st.Publish(c, []byte("veto"))
		require.ErrorIs(t, err, errVeto)
		_, err = q.Enqueue(c, []byte("veto"), store.EnqueueOpts{})
		require.ErrorIs(t, err, errVeto)
		_, err = q.EnqueueMany(c, []store.NewJob{{Payload: []byte("veto")}})
		require.ErrorIs(t, err, errVeto)
		_, err = st.Publish(c, []byte("huge"))
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		_, err = q.Enqueue(c, []byte("huge"), store.EnqueueOpts{})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		_, err = st.PublishMany(c, []store.Message{{Payload: []byte("drop")}})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		assert.Empty(t, evs, "nothing refused was stored")
		stats, err := q.Stats(c)
		require.NoError(t, err)
		assert.Zero(t, stats.Ready)

		_, err = store.Open(c, e.dsn, store.WithInsertMiddleware(nil))
		require.ErrorIs(t, err, store.ErrInvalidArgument)
	})
}
