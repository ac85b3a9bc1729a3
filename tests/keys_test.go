package tests

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// badKeys are keys every keyed entry point rejects with ErrInvalidName on
// both engines.
var badKeys = map[string]string{
	"empty":        "",
	"NUL":          "a\x00b",
	"invalid UTF8": "k\xff\xfe",
	"control":      "line\nbreak",
	"too long":     strings.Repeat("k", store.MaxKeyLen+1),
}

// TestKeysAreValidatedLikeNames: every entry point that takes a key
// rejects a bad one with ErrInvalidName before any I/O, the same on both
// engines: nothing is written, and a transaction that saw the error is
// still usable (Postgres would abort it on a statement error).
func TestKeysAreValidatedLikeNames(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("keys")
		topic := s.Topic[counter]("keys")
		c := ctx(t)
		for name, bad := range badKeys {
			t.Run(name, func(t *testing.T) {
				entry := map[string]func() error{
					"PublishWithKey": func() error { _, err := st.PublishWithKey(c, bad, []byte("v")); return err },
					"PublishMany": func() error {
						ok := "fine"
						_, err := st.PublishMany(c, []store.Message{{Key: &ok, Payload: []byte("v")}, {Key: &bad, Payload: []byte("v")}})
						return err
					},
					"CompactionHead": func() error { _, err := st.Key(bad).CompactionHead(c); return err },
					"TopicKey":       func() error { _, err := topic.Key(bad).CompactionHead(c); return err },
				}
				if bad != "" { // an empty ProduceOpts.Key is an unkeyed message; an empty after, "from the first key"
					entry["Produce"] = func() error { _, err := topic.Produce(c, &counter{N: 1}, store.ProduceOpts{Key: bad}); return err }
					entry["Heads after"] = func() error { _, err := topic.Heads(c, bad, 10); return err }
				}
				for what, call := range entry {
					require.ErrorIs(t, call(), store.ErrInvalidName, what)
				}
				require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
					inTx := map[string]func() error{
						"PublishWithKeyTx": func() error { _, err := st.PublishWithKeyTx(c, tx, bad, []byte("v")); return err },
						"PublishManyTx": func() error {
							_, err := st.PublishManyTx(c, tx, []store.Message{{Key: &bad, Payload: []byte("v")}})
							return err
						},
						"LockCompactionHead": func() error { _, err := st.Key(bad).LockCompactionHead(c, tx); return err },
					}
					if bad != "" {
						inTx["ProduceInTx"] = func() error {
							_, err := topic.ProduceInTx(c, tx, &counter{N: 1}, store.ProduceOpts{Key: bad})
							return err
						}
					}
					for what, call := range inTx {
						require.ErrorIs(t, call(), store.ErrInvalidName, what)
					}
					_, err := st.PublishTx(c, tx, []byte("the transaction still works"))
					return err
				}))
			})
		}
		evs, err := st.ReadSince(c, 0, 100)
		require.NoError(t, err)
		for _, ev := range evs {
			assert.Nil(t, ev.Key, "no keyed event was stored")
		}
		assert.Len(t, evs, len(badKeys), "only the unkeyed events of the transactions")

		longest := strings.Repeat("ключ", store.MaxKeyLen/len("ключ"))
		_, err = st.PublishWithKey(c, longest, []byte("v"))
		require.NoError(t, err, "a key of up to MaxKeyLen bytes of UTF-8 is fine")
		h, err := st.Key(longest).CompactionHead(c)
		require.NoError(t, err)
		assert.Equal(t, "v", string(h.Payload))
	})
}
