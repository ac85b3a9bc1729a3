package tests

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// bytesCodec passes []byte values through unchanged, as a "raw bytes"
// codec does: a nil slice encodes as nil.
type bytesCodec struct{}

func (bytesCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}
	return nil, fmt.Errorf("bytesCodec: %T", v)
}

func (bytesCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("bytesCodec: %T", v)
	}
	*b = append([]byte{}, data...)
	return nil
}

// TestTopicValueEncodedAsNilIsAValue: a non-nil message is a value even
// when the codec encodes it as a nil slice; only a nil message is a
// tombstone (Topic.Publish). Before session 59 such a publish stored a
// tombstone: the key read as deleted and compaction then removed its
// values (attack59 F5). Both typed forms, keyed and unkeyed.
func TestTopicValueEncodedAsNilIsAValue(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t, store.WithCodec(bytesCodec{}))
		c := ctx(t)
		flags := s.Topic[[]byte]("flags")
		on := []byte("on")
		var empty []byte // a value: the flag is set, with no data
		for _, form := range []string{"Publish", "PublishTx"} {
			key := "beta-" + form
			publish := func(m *[]byte, opts store.PublishOpts) (int64, error) {
				if form == "Publish" {
					return flags.Publish(c, m, opts)
				}
				var off int64
				err := s.InTx(c, func(c context.Context, tx store.Tx) error {
					var err error
					off, err = flags.PublishTx(c, tx, m, opts)
					return err
				})
				return off, err
			}
			_, err := publish(&on, store.PublishOpts{Key: key})
			require.NoError(t, err)
			off, err := publish(&empty, store.PublishOpts{Key: key})
			require.NoError(t, err)
			v, err := flags.Key(key).CompactionHead(c)
			require.NoError(t, err, "%s: a non-nil message read back as a tombstone", form)
			require.NotNil(t, v)
			assert.Empty(t, *v, form)
			h, err := flags.Stream().Key(key).CompactionHead(c)
			require.NoError(t, err)
			assert.Equal(t, off, h.Offset, form)
			assert.NotNil(t, h.Payload, "%s: stored as an empty value, not NULL", form)

			unkeyed, err := publish(&empty, store.PublishOpts{})
			require.NoError(t, err)
			evs, err := flags.Stream().ReadSince(c, unkeyed-1, 1)
			require.NoError(t, err)
			require.Len(t, evs, 1)
			assert.NotNil(t, evs[0].Payload, "%s: an unkeyed value stored as empty, as the keyed one", form)

			_, err = publish(nil, store.PublishOpts{Key: key})
			require.NoError(t, err)
			_, err = flags.Key(key).CompactionHead(c)
			assert.ErrorIs(t, err, store.ErrNotFound, "%s: a nil message is still a tombstone", form)
		}
	})
}
