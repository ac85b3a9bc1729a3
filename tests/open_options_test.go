package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestOpenRefusesOutOfRangeOptions: a pool size or payload limit out of
// its range fails Open with ErrInvalidArgument, naming the option, instead
// of being taken as the default (before, attack57 F4: WithMaxConns and
// WithReadConns of 0 or -1 opened a store with the default pool). A pool
// size is refused by the engine whose pool it sizes and ignored by the
// other, and WithMaxConns by OpenPool (the caller's pool), as README's
// Engine differences and the options' docs say: one configuration opens
// on either engine (before, attack58 F2: WithReadConns(0) failed Open on
// PostgreSQL, WithMaxConns(0) on SQLite).
func TestOpenRefusesOutOfRangeOptions(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		own, other := "WithReadConns", "WithMaxConns"
		if e.name == "pg" {
			own, other = other, own
		}
		sizes := map[string]func(int) store.Option{"WithReadConns": store.WithReadConns, "WithMaxConns": store.WithMaxConns}
		refused := map[string]store.Option{
			own + "(0)":                            sizes[own](0),
			own + "(-1)":                           sizes[own](-1),
			"WithMaxPayloadSize(0)":                store.WithMaxPayloadSize(0),
			"WithMaxPayloadSize(-1)":               store.WithMaxPayloadSize(-1),
			"WithMaxPayloadSize(MaxPayloadSize+1)": store.WithMaxPayloadSize(store.MaxPayloadSize + 1),
		}
		for name, opt := range refused {
			s, err := store.Open(c, e.dsn, opt)
			if err == nil {
				_ = s.Close()
			}
			require.ErrorIs(t, err, store.ErrInvalidArgument, name)
		}
		for _, opt := range []store.Option{store.WithReadConns(1), store.WithMaxConns(2), store.WithMaxPayloadSize(1),
			sizes[other](0), sizes[other](-1)} {
			s, err := store.Open(c, e.dsn, opt)
			require.NoError(t, err)
			_, err = s.Stream("opts").Publish(c, []byte("x"))
			require.NoError(t, err)
			require.NoError(t, s.Close())
		}
		if e.name == "pg" {
			pool := e.pool(t)
			s, err := store.OpenPool(c, pool, store.WithMaxConns(0))
			require.NoError(t, err, "OpenPool leaves the caller's pool as it is")
			require.NoError(t, s.Close())
			_, err = store.OpenPool(c, pool, store.WithMaxPayloadSize(0))
			require.ErrorIs(t, err, store.ErrInvalidArgument)
		}
	})
}
