package tests

// Issue 13, item 3: an application developed on SQLite must not break on
// Postgres. Each test here pins a difference between the engines that was
// removed; README's "Engine differences" lists the ones that remain.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestListenerDropsOldestWhenFull: a listener that does not keep up holds
// the newest ListenBuffer notifications and counts the older ones it
// dropped, on both engines (Postgres used to drop the newest, SQLite never
// dropped and nothing could read the count).
func TestListenerDropsOldestWhenFull(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		l, err := s.Listen(c, "flood")
		require.NoError(t, err)
		defer l.Close()
		const extra = 10
		n := store.ListenBuffer + extra
		for i := range n {
			require.NoError(t, s.Notify(c, "flood", []byte(fmt.Sprint(i))))
		}
		require.Eventually(t, func() bool { return l.Dropped() == extra }, 10*time.Second, time.Millisecond,
			"dropped %d, want %d", l.Dropped(), extra)
		require.Equal(t, store.ListenBuffer, l.Buffered())
		for i := extra; i < n; i++ {
			got, err := l.Recv(c)
			require.NoError(t, err)
			require.Equal(t, fmt.Sprint(i), string(got.Payload), "the oldest were dropped, the rest arrive in order")
		}
		// Caught up: later notifications arrive and nothing more is dropped.
		require.NoError(t, s.Notify(c, "flood", []byte("after")))
		got, err := l.Recv(c)
		require.NoError(t, err)
		require.Equal(t, "after", string(got.Payload))
		require.EqualValues(t, extra, l.Dropped())
	})
}

// TestNotifyLimitIsTheSame: the largest payload Notify takes is the same on
// both engines (Postgres NOTIFY's), and it is delivered.
func TestNotifyLimitIsTheSame(t *testing.T) {
	limits := map[string]int{}
	eachEngineInTurn(t, func(t *testing.T, e *engineEnv) { // the engines' limits are compared afterwards
		s := e.open(t)
		c := ctx(t)
		l, err := s.Listen(c, "limit")
		require.NoError(t, err)
		defer l.Close()
		// The largest size that is not refused (the check runs before any I/O).
		probes := 0 // the ones not refused, which are delivered
		largest := sort.Search(16000, func(n int) bool {
			err := s.Notify(c, "limit", make([]byte, n+1))
			if err == nil {
				probes++
			}
			return errors.Is(err, store.ErrPayloadTooLarge)
		})
		require.Greater(t, largest, 5000)
		require.Less(t, largest, 8000)
		limits[e.name] = largest
		// The largest, after the probes (zeros): notifications keep their
		// order.
		want := make([]byte, largest)
		for i := range want {
			want[i] = byte(i)
		}
		require.NoError(t, s.Notify(c, "limit", want))
		for range probes {
			got, err := l.Recv(c)
			require.NoError(t, err)
			require.LessOrEqual(t, len(got.Payload), largest, "a refused probe was delivered")
			require.Equal(t, make([]byte, len(got.Payload)), got.Payload, "a probe")
		}
		got, err := l.Recv(c)
		require.NoError(t, err)
		require.Equal(t, want, got.Payload)
	})
	if len(limits) == 2 { // not when ALK_ENGINES picks one
		require.Equal(t, limits["pg"], limits["lite"], "Notify's limit differs between the engines")
	}
}

// TestBeginCtxBoundsOnlyTheWait: Begin's ctx bounds the wait to begin, not
// the transaction: cancelling it afterwards leaves the transaction open
// for statements and Commit, on both engines (SQLite used to roll it back).
func TestBeginCtxBoundsOnlyTheWait(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t, store.WithMaxConns(2))
		c := ctx(t)
		st := s.Stream("begin")

		bctx, cancel := context.WithCancel(c)
		tx, err := s.Begin(bctx)
		require.NoError(t, err)
		defer tx.Rollback(c)
		_, err = st.PublishTx(c, tx, []byte("before"))
		require.NoError(t, err)
		cancel()
		_, err = st.PublishTx(c, tx, []byte("after"))
		require.NoError(t, err, "the transaction must survive the cancel of Begin's ctx")
		require.NoError(t, tx.Commit(c))
		evs, err := st.ReadSince(c, 0, 10)
		require.NoError(t, err)
		require.Len(t, evs, 2)

		// A Begin that cannot start in time fails with its ctx's error: on
		// SQLite a second transaction waits for the writer slot, on Postgres
		// (WithMaxConns(2)) for a pooled connection.
		var held []store.Tx
		for range map[string]int{"pg": 2, "lite": 1}[e.name] {
			h, err := s.Begin(c)
			require.NoError(t, err)
			defer h.Rollback(c)
			held = append(held, h)
		}
		wctx, wcancel := context.WithTimeout(c, 100*time.Millisecond)
		defer wcancel()
		_, err = s.Begin(wctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		for _, h := range held {
			require.NoError(t, h.Rollback(c))
		}
		tx, err = s.Begin(c)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(c))
	})
}

// TestPlaceholdersBindByNumber: business SQL on a Tx binds $n to the nth
// argument on both engines, in whatever order the placeholders appear
// (SQLite used to number them in order of first appearance, so "$2 ...
// $1" swapped the arguments).
func TestPlaceholdersBindByNumber(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		tx, err := s.Begin(c)
		require.NoError(t, err)
		defer tx.Rollback(c)
		_, err = tx.Exec(c, "CREATE TABLE app_items (id bigint PRIMARY KEY, name text NOT NULL)")
		require.NoError(t, err)
		_, err = tx.Exec(c, "INSERT INTO app_items (name, id) VALUES ($2, $1)", 7, "seven")
		require.NoError(t, err)
		n, err := tx.Exec(c, "UPDATE app_items SET name = $2 WHERE id = $1 AND name = $3", 7, "SEVEN", "seven")
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		var id int64
		var name string
		require.NoError(t, tx.QueryRow(c, "SELECT id, name FROM app_items WHERE name = $2 AND id = $1", 7, "SEVEN").Scan(&id, &name))
		require.Equal(t, int64(7), id)
		require.Equal(t, "SEVEN", name)
		require.NoError(t, tx.Commit(c))
	})
}
