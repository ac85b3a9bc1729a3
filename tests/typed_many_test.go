package tests

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

type mail struct {
	To string `json:"to"`
}

// badMail fails to encode, to see a codec error reach the caller.
type badMail struct{ mail }

func (badMail) MarshalJSON() ([]byte, error) { return nil, errors.New("no") }

// TestTypedEnqueueMany: JobQueue[T] enqueues a batch of values, alone or
// inside the caller's transaction (rolled back: nothing added), with each
// job's options; the unique forms say which were duplicates; a value that
// does not encode fails the batch with ErrCodec, naming the job, before
// any I/O.
func TestTypedEnqueueMany(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		s := e.open(t)
		q := s.JobQueue[mail]("mails")
		ids, err := q.EnqueueMany(c, []store.TypedJob[mail]{
			{Value: mail{To: "ada"}},
			{Value: mail{To: "bob"}, Opts: store.EnqueueOpts{Priority: 5}},
		})
		require.NoError(t, err)
		require.Len(t, ids, 2)
		bob, err := q.Queue().Job(c, ids[1])
		require.NoError(t, err)
		assert.Equal(t, 5, bob.Priority)
		v, err := q.Payload(bob)
		require.NoError(t, err)
		assert.Equal(t, mail{To: "bob"}, v)

		errRollback := errors.New("roll back")
		err = s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			ids, err := q.EnqueueManyTx(ctx, tx, []store.TypedJob[mail]{{Value: mail{To: "cy"}}})
			require.NoError(t, err)
			_, err = q.Queue().JobTx(ctx, tx, ids[0])
			require.NoError(t, err, "the transaction sees its job")
			return errRollback
		})
		require.ErrorIs(t, err, errRollback)
		st, err := q.Queue().Stats(c)
		require.NoError(t, err)
		assert.EqualValues(t, 2, st.Ready, "the rolled-back job is gone")

		once := store.EnqueueOpts{Unique: store.UniqueOpts{Key: "ada"}}
		res, err := q.EnqueueManyUnique(c, []store.TypedJob[mail]{{Value: mail{To: "ada"}, Opts: once}, {Value: mail{To: "ada"}, Opts: once}})
		require.NoError(t, err)
		assert.False(t, res[0].Duplicate)
		assert.Equal(t, store.Enqueued{ID: res[0].ID, Duplicate: true}, res[1])
		err = s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			res, err := q.EnqueueManyUniqueTx(ctx, tx, []store.TypedJob[mail]{{Value: mail{To: "ada"}, Opts: once}})
			require.NoError(t, err)
			assert.True(t, res[0].Duplicate)
			return nil
		})
		require.NoError(t, err)

		bad := s.JobQueue[badMail]("mails")
		_, err = bad.EnqueueMany(c, []store.TypedJob[badMail]{{}, {}})
		require.ErrorIs(t, err, store.ErrCodec)
		assert.ErrorContains(t, err, "job 0")
		st, err = q.Queue().Stats(c)
		require.NoError(t, err)
		assert.EqualValues(t, 3, st.Ready, "nothing of the failed batch was added")
	})
}
