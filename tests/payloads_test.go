package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

// An expired job is never handed out, whatever its state: a job whose claim
// lapsed after its ExpiresAt is not reclaimed but goes to dead ("expired"),
// through Claim, SweepExpired and the janitor alike.
func TestExpiredJobIsNeverReclaimed(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		q := s.Queue("expiring")

		enqueueAndLapse := func() int64 {
			id, err := q.Enqueue(c, []byte("x"), store.EnqueueOpts{ExpiresAt: clk.Now().Add(400 * time.Millisecond)})
			require.NoError(t, err)
			jobs, err := q.Claim(c, "w1", 10, 200*time.Millisecond)
			require.NoError(t, err)
			require.Equal(t, []int64{id}, ids(jobs))
			clk.Advance(700 * time.Millisecond) // the claim lapsed, then the job expired
			return id
		}
		dead := func(id int64) {
			t.Helper()
			j, err := q.GetJob(c, id)
			require.NoError(t, err)
			assert.Equal(t, store.JobDead, j.State)
			assert.Equal(t, "expired", j.LastError)
			assert.NotNil(t, j.DiedAt)
			assert.Nil(t, j.ClaimExpiresAt)
		}

		// Claim buries it instead of handing it out again.
		id := enqueueAndLapse()
		jobs, err := q.Claim(c, "w2", 10, time.Minute)
		require.NoError(t, err)
		assert.Empty(t, jobs, "an expired job whose claim lapsed must not be reclaimed")
		dead(id)

		// SweepExpired covers it.
		id = enqueueAndLapse()
		n, err := q.SweepExpired(c)
		require.NoError(t, err)
		assert.EqualValues(t, 1, n)
		dead(id)

		// So does the janitor.
		id = enqueueAndLapse()
		rep, err := janitor.New(s, janitor.Config{}).RunOnce(c)
		require.NoError(t, err)
		assert.EqualValues(t, 1, rep.JobsExpired)
		dead(id)

		// A live claim past ExpiresAt still settles its job: the job was handed
		// out before it expired, and sweeping it would only make it run twice.
		id, err = q.Enqueue(c, []byte("x"), store.EnqueueOpts{ExpiresAt: clk.Now().Add(time.Second)})
		require.NoError(t, err)
		jobs, err = q.Claim(c, "w3", 10, time.Minute)
		require.NoError(t, err)
		require.Equal(t, []int64{id}, ids(jobs))
		clk.Advance(2 * time.Second)
		n, err = q.SweepExpired(c)
		require.NoError(t, err)
		assert.Zero(t, n)
		require.NoError(t, jobs[0].Ack(c))
	})
}

// samePayload asserts got is want, telling nil from empty (assert.Equal
// does not: it compares byte slices with bytes.Equal).
func samePayload(t *testing.T, want, got []byte, what string) {
	t.Helper()
	if want == nil {
		assert.Nil(t, got, "%s: a nil payload reads back as nil", what)
		return
	}
	if assert.NotNil(t, got, "%s: an empty payload reads back as a non-nil empty slice, not nil", what) {
		assert.Equal(t, want, got, what)
	}
}

// One rule on both engines: a nil payload stays nil (a keyed nil is a
// tombstone) and an empty non-nil payload is a value that reads back as a
// non-nil empty slice, for events, heads, jobs, outbox messages and
// notifications.
func TestEmptyPayloadIsAValueNilIsNot(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		empty := []byte{}

		st := s.Stream("payloads")
		var offs []int64
		for _, p := range [][]byte{empty, nil} {
			off, err := st.Publish(c, p)
			require.NoError(t, err)
			offs = append(offs, off)
		}
		many, err := st.PublishMany(c, []store.Message{{Payload: empty}, {Payload: nil}})
		require.NoError(t, err)
		offs = append(offs, many...)
		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		require.Equal(t, offs, offsets(evs))
		for i, want := range [][]byte{empty, nil, empty, nil} {
			samePayload(t, want, evs[i].Payload, fmt.Sprintf("event %d", i))
		}

		_, err = st.PublishWithKey(c, "empty", empty)
		require.NoError(t, err)
		_, err = st.PublishWithKey(c, "gone", nil)
		require.NoError(t, err)
		h, err := st.Key("empty").CompactionHead(c)
		require.NoError(t, err, "an empty keyed payload is a value, not a tombstone")
		samePayload(t, empty, h.Payload, "head")
		_, err = st.Key("gone").CompactionHead(c)
		require.ErrorIs(t, err, store.ErrNotFound, "a nil keyed payload is a tombstone")
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			h, err := st.Key("empty").LockCompactionHead(c, tx)
			require.NoError(t, err)
			require.NotNil(t, h, "an empty head is a value under the lock too")
			samePayload(t, empty, h.Payload, "locked head")
			return nil
		}))

		q := s.Queue("payloads")
		var jobIDs []int64
		for _, p := range [][]byte{empty, nil} {
			id, err := q.Enqueue(c, p, store.EnqueueOpts{})
			require.NoError(t, err)
			jobIDs = append(jobIDs, id)
		}
		moreIDs, err := q.EnqueueMany(c, []store.NewJob{{Payload: empty}, {Payload: nil}})
		require.NoError(t, err)
		jobIDs = append(jobIDs, moreIDs...)
		wants := [][]byte{empty, nil, empty, nil}
		for i, id := range jobIDs {
			j, err := q.GetJob(c, id)
			require.NoError(t, err)
			samePayload(t, wants[i], j.Payload, fmt.Sprintf("job %d", i))
		}
		jobs, err := q.Claim(c, "w", 10, time.Minute)
		require.NoError(t, err)
		require.Equal(t, jobIDs, ids(jobs))
		for i, j := range jobs {
			samePayload(t, wants[i], j.Payload, fmt.Sprintf("claimed job %d", i))
		}

		ob := s.Outbox("payloads")
		var msgIDs []int64
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			for _, p := range [][]byte{empty, nil} {
				id, err := ob.EnqueueTx(c, tx, p, store.EnqueueOpts{})
				require.NoError(t, err)
				msgIDs = append(msgIDs, id)
			}
			return nil
		}))
		for i, id := range msgIDs {
			m, err := ob.Message(c, id)
			require.NoError(t, err)
			samePayload(t, wants[i], m.Payload, fmt.Sprintf("outbox message %d", i))
		}

		l, err := s.Listen(c, "payloads")
		require.NoError(t, err)
		defer l.Close()
		for _, p := range [][]byte{empty, nil} {
			require.NoError(t, s.Notify(c, "payloads", p))
		}
		for i, want := range [][]byte{empty, nil} {
			n, err := l.Recv(c)
			require.NoError(t, err)
			samePayload(t, want, n.Payload, fmt.Sprintf("notification %d", i))
		}
	})
}
