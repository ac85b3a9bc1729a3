package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestOpenRefusesOutOfRangeOptions: a pool size or payload limit out of
// its range fails Open with ErrInvalidArgument, naming the option, on
// either engine, instead of being taken as the default (before, attack57
// F4: WithMaxConns and WithReadConns of 0 or -1 opened a store with the
// default pool).
func TestOpenRefusesOutOfRangeOptions(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		for name, opt := range map[string]store.Option{
			"WithReadConns(0)":                     store.WithReadConns(0),
			"WithReadConns(-1)":                    store.WithReadConns(-1),
			"WithMaxConns(0)":                      store.WithMaxConns(0),
			"WithMaxConns(-1)":                     store.WithMaxConns(-1),
			"WithMaxPayloadSize(0)":                store.WithMaxPayloadSize(0),
			"WithMaxPayloadSize(-1)":               store.WithMaxPayloadSize(-1),
			"WithMaxPayloadSize(MaxPayloadSize+1)": store.WithMaxPayloadSize(store.MaxPayloadSize + 1),
		} {
			s, err := store.Open(c, e.dsn, opt)
			if err == nil {
				_ = s.Close()
			}
			require.ErrorIs(t, err, store.ErrInvalidArgument, name)
		}
		for _, opt := range []store.Option{store.WithReadConns(1), store.WithMaxConns(2), store.WithMaxPayloadSize(1)} {
			s, err := store.Open(c, e.dsn, opt)
			require.NoError(t, err)
			require.NoError(t, s.Close())
		}
	})
}
