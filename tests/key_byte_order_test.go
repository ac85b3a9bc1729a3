package tests

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sort"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/pgtest"
	"github.com/alkstore/alkstore/store"
)

var icuSeq atomic.Int64

// icuDatabase replaces e's PostgreSQL database by an empty one of its
// server whose collation is ICU's en-US (a common production default; the
// tests' cluster is --locale=C), dropped when the test ends. Nothing on
// SQLite, whose text compares in byte order.
func icuDatabase(t *testing.T, e *engineEnv) {
	t.Helper()
	if e.name != "pg" {
		return
	}
	if !e.pg.CopiesDatabases() {
		t.Skipf("%s creates the databases", pgtest.CreateDBEnv)
	}
	admin, err := pgx.Connect(ctx(t), e.pg.AdminDSN())
	require.NoError(t, err)
	defer admin.Close(context.Background())
	name := fmt.Sprintf("alk_test_%d_icu_%d", os.Getpid(), icuSeq.Add(1)) // the lease check's pattern
	_, err = admin.Exec(ctx(t), "CREATE DATABASE "+name+" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'")
	require.NoError(t, err)
	t.Cleanup(func() { // after the stores' Close, registered later
		c, err := pgx.Connect(context.Background(), e.pg.AdminDSN())
		if err == nil {
			_, err = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
		if err != nil {
			t.Errorf("dropping %s: %v", name, err)
		}
	})
	u, err := url.Parse(e.pg.AdminDSN())
	require.NoError(t, err)
	u.Path = "/" + name
	e.dsn = u.String()
}

// byteOrderKeys sort differently under en-US than in byte order.
var byteOrderKeys = []string{"b", "B", "a", "A", "_x", "1", "é", "z"}

// TestHeadsListKeysInByteOrder: Heads promises key order, the same on both
// engines. On a PostgreSQL database whose collation is ICU en-US, Heads
// listed (and paged, key > after) ["_x" "1" "a" "A" "b" "B" "é" "z"], where
// SQLite lists byte order ["1" "A" "B" "_x" "a" "b" "z" "é"] (attack53b
// F1). Since 00046 the heads' key column is COLLATE "C" on PostgreSQL.
func TestHeadsListKeysInByteOrder(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		icuDatabase(t, e)
		c := ctx(t)
		st := e.open(t).Stream("kv")
		for _, k := range byteOrderKeys {
			_, err := st.PublishWithKey(c, k, []byte(k))
			require.NoError(t, err)
		}
		var got []string
		for after := ""; ; {
			hs, err := st.Heads(c, after, 3)
			require.NoError(t, err)
			if len(hs) == 0 {
				break
			}
			for _, h := range hs {
				got = append(got, h.Key)
			}
			after = hs[len(hs)-1].Key
		}
		want := slices.Clone(byteOrderKeys)
		sort.Strings(want)
		require.Equal(t, want, got)
	})
}

// TestTxInKeyOrderMeetsPublishManyWithoutDeadlock: the README tells a
// transaction making several keyed publishes to take its keys in key
// order, the order a keyed PublishMany locks its heads in. On an ICU en-US
// database PublishMany's order followed the collation ("a" before "B")
// while Go's sort.Strings puts "B" first: a Tx publishing B then a, and a
// PublishMany of a and B holding a and waiting for B, deadlocked (40P01;
// attack53b F1). The interleaving is forced: the Tx publishes B, the
// PublishMany starts and waits for a lock, then the Tx publishes a. In byte
// order PublishMany takes B first, waits there, and both go through.
// SQLite runs one writing transaction at a time: nothing to interleave.
func TestTxInKeyOrderMeetsPublishManyWithoutDeadlock(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	icuDatabase(t, e)
	c := ctx(t)
	s := e.open(t)
	st := s.Stream("kv")
	keys := []string{"a", "B"}
	sort.Strings(keys) // B, a
	for _, k := range keys {
		_, err := st.PublishWithKey(c, k, []byte("0"))
		require.NoError(t, err)
	}
	watch, err := pgx.Connect(c, e.dsn)
	require.NoError(t, err)
	defer watch.Close(context.Background())

	tx, err := s.Begin(c)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = st.PublishWithKeyTx(c, tx, keys[0], []byte("tx"))
	require.NoError(t, err)
	many := make(chan error, 1)
	go func() {
		a, b := "a", "B"
		_, err := st.PublishMany(c, []store.Message{{Key: &a, Payload: []byte("m")}, {Key: &b, Payload: []byte("m")}})
		many <- err
	}()
	waitForLockWait(t, watch, "PublishMany of a and B")
	_, err = st.PublishWithKeyTx(c, tx, keys[1], []byte("tx"))
	if err == nil {
		err = tx.Commit(c)
	}
	errMany := <-many
	require.NoError(t, errors.Join(err, errMany), "a Tx publishing %q in that order beside a PublishMany of them", keys)
}
