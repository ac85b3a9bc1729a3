package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// hdr is a distinct header set per write form, so a mix-up between rows
// shows.
func hdr(form string) map[string]string {
	return map[string]string{"form": form, "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
}

// Every way to enqueue a job carries its headers, and every way to read a
// job returns them; a job enqueued without headers reads as nil.
func TestJobHeadersRoundTrip(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		q := s.Queue("h")
		want := map[int64]map[string]string{} // job id -> headers (nil: none)
		add := func(id int64, err error, h map[string]string) {
			t.Helper()
			require.NoError(t, err)
			want[id] = h
		}

		id, err := q.Enqueue(c, []byte("single"), store.EnqueueOpts{Headers: hdr("single")})
		add(id, err, hdr("single"))
		id, err = q.Enqueue(c, []byte("none"), store.EnqueueOpts{})
		add(id, err, nil)
		id, err = q.Enqueue(c, []byte("empty map"), store.EnqueueOpts{Headers: map[string]string{}})
		add(id, err, nil)
		ids, err := q.EnqueueMany(c, []store.NewJob{
			{Payload: []byte("m0"), Opts: store.EnqueueOpts{Headers: hdr("many0")}},
			{Payload: []byte("m1")},
			{Payload: []byte("m2"), Opts: store.EnqueueOpts{Headers: hdr("many2")}},
		})
		require.NoError(t, err)
		add(ids[0], nil, hdr("many0"))
		add(ids[1], nil, nil)
		add(ids[2], nil, hdr("many2"))
		ids, err = q.EnqueueMany(c, []store.NewJob{{Payload: []byte("plain0")}, {Payload: []byte("plain1")}})
		require.NoError(t, err)
		add(ids[0], nil, nil)
		add(ids[1], nil, nil)
		u, err := q.EnqueueUnique(c, []byte("u"), store.EnqueueOpts{Headers: hdr("unique"), Unique: store.UniqueOpts{Key: "u1"}})
		add(u.ID, err, hdr("unique"))
		us, err := q.EnqueueManyUnique(c, []store.NewJob{
			{Payload: []byte("u2"), Opts: store.EnqueueOpts{Headers: hdr("unique-many"), Unique: store.UniqueOpts{Key: "u2"}}},
			{Payload: []byte("u3"), Opts: store.EnqueueOpts{Unique: store.UniqueOpts{Key: "u3"}}},
		})
		require.NoError(t, err)
		add(us[0].ID, nil, hdr("unique-many"))
		add(us[1].ID, nil, nil)
		ids, err = q.EnqueueMany(c, []store.NewJob{ // a batch with unique and plain jobs
			{Payload: []byte("u4"), Opts: store.EnqueueOpts{Unique: store.UniqueOpts{Key: "u4"}}},
			{Payload: []byte("n5"), Opts: store.EnqueueOpts{Headers: hdr("mixed-plain")}},
		})
		require.NoError(t, err)
		add(ids[0], nil, nil)
		add(ids[1], nil, hdr("mixed-plain"))
		typed := s.JobQueue[string]("h")
		id, err = typed.Enqueue(c, "typed", store.EnqueueOpts{Headers: hdr("typed")})
		add(id, err, hdr("typed"))
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			id, err := q.EnqueueTx(c, tx, []byte("tx"), store.EnqueueOpts{Headers: hdr("tx")})
			add(id, err, hdr("tx"))
			j, err := q.JobTx(c, tx, id)
			require.NoError(t, err)
			assert.Equal(t, hdr("tx"), j.Headers, "JobTx")
			ids, err := q.EnqueueManyTx(c, tx, []store.NewJob{{Payload: []byte("txm"), Opts: store.EnqueueOpts{Headers: hdr("tx-many")}}})
			require.NoError(t, err)
			add(ids[0], nil, hdr("tx-many"))
			id, err = typed.EnqueueTx(c, tx, "typed-tx", store.EnqueueOpts{Headers: hdr("typed-tx")})
			add(id, err, hdr("typed-tx"))
			return nil
		}))

		for id, h := range want {
			j, err := q.Job(c, id)
			require.NoError(t, err)
			assert.Equal(t, h, j.Headers, "Job %d (%s)", id, j.Payload)
		}
		page, err := q.Jobs(c, store.JobsOpts{State: store.JobPending})
		require.NoError(t, err)
		require.Len(t, page, len(want))
		for _, j := range page {
			assert.Equal(t, want[j.ID], j.Headers, "Jobs: %s", j.Payload)
		}
		claimed, err := q.Claim(c, "w", 100, time.Minute)
		require.NoError(t, err)
		require.Len(t, claimed, len(want))
		for _, j := range claimed {
			assert.Equal(t, want[j.ID], j.Headers, "Claim: %s", j.Payload)
			require.NoError(t, j.Ack(c))
		}

		// The outbox (a queue underneath) and schedules (their fires).
		ob := s.Outbox("hooks")
		oid, err := ob.Enqueue(c, []byte("ob"), store.EnqueueOpts{Headers: hdr("outbox")})
		require.NoError(t, err)
		var txID int64
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			txID, err = ob.EnqueueTx(c, tx, []byte("ob-tx"), store.EnqueueOpts{Headers: hdr("outbox-tx")})
			return err
		}))
		for id, h := range map[int64]map[string]string{oid: hdr("outbox"), txID: hdr("outbox-tx")} {
			j, err := ob.Job(c, id)
			require.NoError(t, err)
			assert.Equal(t, h, j.Headers)
		}

		require.NoError(t, s.Schedule("tick").Set(c, store.ScheduleSpec{Spec: "@every 1s", Queue: "ticks", Headers: hdr("schedule")}))
		require.NoError(t, s.Schedule("tock").Set(c, store.ScheduleSpec{Spec: "@every 1s", Queue: "ticks"}))
		info, err := s.Schedule("tick").Info(c)
		require.NoError(t, err)
		assert.Equal(t, hdr("schedule"), info.Headers)
		clock := time.Now().Add(2 * time.Second)
		s2 := e.open(t, store.WithClock(func() time.Time { return clock }))
		n, err := s2.Scheduler("w", store.SchedulerOpts{}).RunOnce(c)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		fired, err := s2.Queue("ticks").Claim(c, "w", 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, fired, 2)
		var got []map[string]string
		for _, j := range fired {
			got = append(got, j.Headers)
		}
		assert.ElementsMatch(t, []map[string]string{hdr("schedule"), nil}, got)
	})
}

// Every way to publish an event carries its headers, and every way to read
// one returns them; an event published without headers reads as nil.
func TestEventHeadersRoundTrip(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		st := s.Stream("h")
		want := map[int64]map[string]string{}
		add := func(off int64, err error, h map[string]string) {
			t.Helper()
			require.NoError(t, err)
			want[off] = h
		}
		k := "k"
		off, err := st.PublishMessage(c, store.Message{Payload: []byte("single"), Headers: hdr("single")})
		add(off, err, hdr("single"))
		off, err = st.PublishMessage(c, store.Message{Key: &k, Payload: []byte("keyed"), Headers: hdr("keyed")})
		add(off, err, hdr("keyed"))
		off, err = st.Publish(c, []byte("plain"))
		add(off, err, nil)
		off, err = st.PublishWithKey(c, "k", []byte("plain keyed"))
		add(off, err, nil)
		offs, err := st.PublishMany(c, []store.Message{
			{Payload: []byte("m0"), Headers: hdr("many0")},
			{Key: &k, Payload: []byte("m1")},
			{Key: &k, Payload: []byte("m2"), Headers: hdr("many2")},
		})
		require.NoError(t, err)
		add(offs[0], nil, hdr("many0"))
		add(offs[1], nil, nil)
		add(offs[2], nil, hdr("many2"))
		offs, err = st.PublishMany(c, []store.Message{{Payload: []byte("p0")}, {Payload: []byte("p1")}})
		require.NoError(t, err)
		add(offs[0], nil, nil)
		add(offs[1], nil, nil)
		topic := s.Topic[string]("h")
		v := "typed"
		off, err = topic.Publish(c, &v, store.PublishOpts{Headers: hdr("typed")})
		add(off, err, hdr("typed"))
		off, err = topic.Publish(c, &v, store.PublishOpts{Key: "tk", Headers: hdr("typed-keyed")})
		add(off, err, hdr("typed-keyed"))
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			off, err := st.PublishMessageTx(c, tx, store.Message{Payload: []byte("tx"), Headers: hdr("tx")})
			add(off, err, hdr("tx"))
			offs, err := st.PublishManyTx(c, tx, []store.Message{{Payload: []byte("txm"), Headers: hdr("tx-many")}})
			require.NoError(t, err)
			add(offs[0], nil, hdr("tx-many"))
			off, err = topic.PublishTx(c, tx, &v, store.PublishOpts{Headers: hdr("typed-tx")})
			add(off, err, hdr("typed-tx"))
			evs, err := st.ReadSinceTx(c, tx, 0, 100)
			require.NoError(t, err)
			for _, ev := range evs {
				assert.Equal(t, want[ev.Offset], ev.Headers, "ReadSinceTx: %s", ev.Payload)
			}
			return nil
		}))

		check := func(how string, evs []store.Event) {
			t.Helper()
			require.Len(t, evs, len(want), how)
			for _, ev := range evs {
				assert.Equal(t, want[ev.Offset], ev.Headers, "%s: %s", how, ev.Payload)
			}
		}
		evs, err := st.ReadSince(c, 0, 100)
		require.NoError(t, err)
		check("ReadSince", evs)
		evs, err = st.ReadFromConsumer(c, "c", 100)
		require.NoError(t, err)
		check("ReadFromConsumer", evs)
		r, err := st.Subscribe(c, "sub", store.SubscribeOpts{})
		require.NoError(t, err)
		defer r.Close()
		evs = nil
		for range want {
			ev, err := r.Recv(c)
			require.NoError(t, err)
			evs = append(evs, ev)
		}
		check("Subscribe", evs)
	})
}

// Headers past the bound, or not storable as given, fail before any I/O
// with ErrInvalidArgument, naming the message of a batch.
func TestHeadersBound(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		q, st := s.Queue("b"), s.Stream("b")
		atBound := map[string]string{"k": strings.Repeat("v", store.MaxHeadersSize-1)}
		over := map[string]string{"k": strings.Repeat("v", store.MaxHeadersSize)}

		id, err := q.Enqueue(c, nil, store.EnqueueOpts{Headers: atBound})
		require.NoError(t, err, "exactly MaxHeadersSize bytes fit")
		j, err := q.Job(c, id)
		require.NoError(t, err)
		assert.Equal(t, atBound, j.Headers)
		_, err = st.PublishMessage(c, store.Message{Headers: atBound})
		require.NoError(t, err)

		for name, bad := range map[string]map[string]string{
			"over the bound": over,
			"empty name":     {"": "v"},
			"NUL in value":   {"k": "a\x00b"},
			"invalid UTF-8":  {"k\xff": "v"},
		} {
			_, err := q.Enqueue(c, nil, store.EnqueueOpts{Headers: bad})
			require.ErrorIs(t, err, store.ErrInvalidArgument, name)
			_, err = st.PublishMessage(c, store.Message{Headers: bad})
			require.ErrorIs(t, err, store.ErrInvalidArgument, name)
			k := "k"
			_, err = st.PublishMessage(c, store.Message{Key: &k, Headers: bad})
			require.ErrorIs(t, err, store.ErrInvalidArgument, name)
			err = s.Schedule("s").Set(c, store.ScheduleSpec{Spec: "@hourly", Queue: "q", Headers: bad})
			require.ErrorIs(t, err, store.ErrInvalidArgument, name)
		}
		_, err = q.EnqueueMany(c, []store.NewJob{{}, {Opts: store.EnqueueOpts{Headers: over}}})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		assert.Contains(t, err.Error(), "job 1")
		_, err = st.PublishMany(c, []store.Message{{}, {Headers: over}})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		assert.Contains(t, err.Error(), "message 1")

		stats, err := q.Stats(c)
		require.NoError(t, err)
		assert.EqualValues(t, 1, stats.Ready, "no refused job was stored")
		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		assert.Len(t, evs, 1, "no refused event was stored")
	})
}
