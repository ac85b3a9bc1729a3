package tests

import (
	"errors"
	"testing"

	"github.com/alkstore/alkstore/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFollowSaveOffsetNamesItsOperation: a followed stream has no consumer,
// so its receiver's SaveOffset is refused, with an error like every other
// of the store's: an *OpError naming the operation and the stream, matching
// ErrInvalidArgument (attack56b F8: a bare "invalid argument: …").
func TestFollowSaveOffsetNamesItsOperation(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("feed")
		_, err := st.Publish(c, []byte("x"))
		require.NoError(t, err)
		f, err := st.Follow(c, 0, store.SubscribeOpts{})
		require.NoError(t, err)
		defer f.Close()
		_, err = f.Recv(c)
		require.NoError(t, err)
		err = f.SaveOffset(c)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		var oe *store.OpError
		assert.True(t, errors.As(err, &oe), "an *store.OpError: %v", err)
		assert.Contains(t, err.Error(), `alkstore: save offset "feed": `)
	})
}
