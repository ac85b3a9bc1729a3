package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/alkstore/alkstore/store"
)

func publishN(t *testing.T, st *store.Stream, n int) []int64 {
	t.Helper()
	offs := make([]int64, n)
	for i := range offs {
		off, err := st.Publish(ctx(t), []byte(fmt.Sprint(i)))
		require.NoError(t, err)
		offs[i] = off
	}
	return offs
}

func recvN(t *testing.T, r *store.EventReceiver, n int) []int64 {
	t.Helper()
	out := make([]int64, n)
	for i := range out {
		ev, err := r.Recv(ctx(t))
		require.NoError(t, err)
		out[i] = ev.Offset
	}
	return out
}

func TestSubscribeReplaysThenFollows(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("feed")
		c := ctx(t)
		offs := publishN(t, st, 3)
		require.NoError(t, st.SaveOffset(c, "mailer", offs[0]))

		r, err := st.Subscribe(c, "mailer", store.SubscribeOpts{})
		require.NoError(t, err)
		defer r.Close()
		assert.Zero(t, r.Position())
		require.NoError(t, r.SaveOffset(c), "saving before the first event is a no-op")
		assert.Equal(t, offs[1:], recvN(t, r, 2), "replay from the saved offset")
		assert.Equal(t, offs[2], r.Position())

		live := publishN(t, st, 2)
		assert.Equal(t, live, recvN(t, r, 2), "then live events")
		require.NoError(t, r.SaveOffset(c))
		got, err := st.Offset(c, "mailer")
		require.NoError(t, err)
		assert.Equal(t, live[1], got)

		_, ok, err := r.TryRecv(c)
		require.NoError(t, err)
		assert.False(t, ok, "idle: no event, no error")
	})
}

func TestSubscribersProgressIndependently(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("shared")
		c := ctx(t)
		a, err := st.Subscribe(c, "a", store.SubscribeOpts{})
		require.NoError(t, err)
		defer a.Close()
		b, err := st.Subscribe(c, "b", store.SubscribeOpts{})
		require.NoError(t, err)
		defer b.Close()
		offs := publishN(t, st, 4)
		assert.Equal(t, offs, recvN(t, a, 4))
		require.NoError(t, a.SaveOffset(c))
		assert.Equal(t, offs[:1], recvN(t, b, 1))
		require.NoError(t, b.SaveOffset(c))
		ga, _ := st.Offset(c, "a")
		gb, _ := st.Offset(c, "b")
		assert.Equal(t, offs[3], ga)
		assert.Equal(t, offs[0], gb)
	})
}

// TestStalledConsumerSavesOnlyWhatItWasGiven: the receiver reads ahead into
// its buffer, but SaveOffset saves the last event Recv returned.
func TestStalledConsumerSavesOnlyWhatItWasGiven(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("stall")
		c := ctx(t)
		offs := publishN(t, st, 50)
		r, err := st.Subscribe(c, "slow", store.SubscribeOpts{Buffer: 4})
		require.NoError(t, err)
		defer r.Close()
		assert.Equal(t, offs[:3], recvN(t, r, 3))
		require.NoError(t, r.SaveOffset(c))
		got, err := st.Offset(c, "slow")
		require.NoError(t, err)
		assert.Equal(t, offs[2], got)
	})
}

func TestBurstIntoSmallBufferArrivesInOrder(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("burst")
		c := ctx(t)
		r, err := st.Subscribe(c, "c", store.SubscribeOpts{Buffer: 16})
		require.NoError(t, err)
		defer r.Close()
		msgs := make([]store.Message, 500)
		offs, err := st.PublishMany(c, msgs)
		require.NoError(t, err)
		assert.Equal(t, offs, recvN(t, r, 500))
	})
}

// TestAutoSave: auto-save covers only events the caller finished with, and
// an event is finished once the caller asks for the next one; the event being
// handed out is never saved (a consumer dying while processing it must get
// it again).
func TestAutoSave(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("auto")
		c := ctx(t)
		offs := publishN(t, st, 10)
		r, err := st.Subscribe(c, "c", store.SubscribeOpts{AutoSaveEvery: 4})
		require.NoError(t, err)
		defer r.Close()
		saved := func() int64 {
			got, err := st.Offset(c, "c")
			require.NoError(t, err)
			return got
		}
		recvN(t, r, 4)
		assert.Zero(t, saved(), "three events finished; the fourth is still being processed")
		recvN(t, r, 1)
		assert.Equal(t, offs[3], saved(), "asking for the fifth finished the fourth: saved after every 4th finished event")
		recvN(t, r, 4)
		assert.Equal(t, offs[7], saved())
	})
}

// TestPostgresForwarderHealsTheGap: the forwarder's connection is killed
// and cannot come back until an event has committed elsewhere; once it
// reconnects the receiver delivers that event, without closing.
func TestPostgresForwarderHealsTheGap(t *testing.T) {
	e := newEnv(t, "pg")
	c := ctx(t)
	var gateMu sync.Mutex
	gate := make(chan struct{})
	close(gate) // open
	cfg, err := pgxpool.ParseConfig(e.dsn)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = "heal-test"
	cfg.BeforeConnect = func(ctx context.Context, _ *pgx.ConnConfig) error {
		gateMu.Lock()
		g := gate
		gateMu.Unlock()
		select {
		case <-g:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	pool, err := pgxpool.NewWithConfig(c, cfg)
	require.NoError(t, err)
	defer pool.Close()
	s, err := store.OpenPool(c, pool)
	require.NoError(t, err)
	defer s.Close()
	other := e.open(t) // another "process": its own pool and feed
	st := s.Stream("heal")

	r, err := st.Subscribe(c, "c", store.SubscribeOpts{})
	require.NoError(t, err)
	defer r.Close()
	// Subscribe does not wait for the forwarder's LISTEN (the receiver's
	// first read covers what committed before it); Listen does, so the
	// listener's backend is in pg_stat_activity before it is looked up.
	l, err := s.Listen(c, "heal-ready")
	require.NoError(t, err)
	l.Close()
	first := publishN(t, other.Stream("heal"), 1)
	assert.Equal(t, first, recvN(t, r, 1), "live delivery through the forwarder")

	admin, err := pgx.Connect(c, e.dsn)
	require.NoError(t, err)
	defer admin.Close(c)
	listenerPID := func() (pid int) {
		err := admin.QueryRow(c, `SELECT pid FROM pg_stat_activity
			WHERE application_name = 'heal-test' AND query LIKE '%LISTEN alkstore%'`).Scan(&pid)
		require.NoError(t, err)
		return pid
	}
	before := listenerPID()

	gateMu.Lock()
	gate = make(chan struct{}) // closed gate: no new connection for the forwarder
	gateMu.Unlock()
	_, err = admin.Exec(c, "SELECT pg_terminate_backend($1)", before)
	require.NoError(t, err)
	gap := publishN(t, other.Stream("heal"), 1) // commits while nobody listens
	gateMu.Lock()
	close(gate)
	gateMu.Unlock()

	assert.Equal(t, gap, recvN(t, r, 1), "the reconnect wake re-reads what the outage hid")
	assert.NotEqual(t, before, listenerPID(), "the forwarder reconnected")
	after := publishN(t, other.Stream("heal"), 1)
	assert.Equal(t, after, recvN(t, r, 1), "and keeps delivering")
}

func TestNotifications(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		require.NoError(t, s.Notify(c, "news", []byte("before listening")))
		l, err := s.Listen(c, "news")
		require.NoError(t, err)
		defer l.Close()
		other, err := s.Listen(c, "other")
		require.NoError(t, err)
		defer other.Close()

		rollback := s.InTx(c, func(c context.Context, tx store.Tx) error {
			require.NoError(t, s.NotifyTx(c, tx, "news", []byte("rolled back")))
			return errors.New("roll back")
		})
		require.Error(t, rollback)
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			return s.NotifyTx(c, tx, "news", []byte("committed"))
		}))
		binary := []byte{0, 1, 2, 255}
		require.NoError(t, s.Notify(c, "news", binary))
		require.NoError(t, s.Notify(c, "news", []byte("marker")))

		var got []string
		for len(got) < 3 {
			n, err := l.Recv(c)
			require.NoError(t, err)
			assert.Equal(t, "news", n.Channel)
			got = append(got, string(n.Payload))
		}
		assert.Equal(t, []string{"committed", string(binary), "marker"}, got,
			"no history, nothing from the rollback, the commit exactly once, in order")

		require.NoError(t, s.Notify(c, "other", []byte("x")))
		n, err := other.Recv(c)
		require.NoError(t, err)
		assert.Equal(t, "x", string(n.Payload), "channels are separate")

		big := []byte(strings.Repeat("x", 8000))
		err = s.Notify(c, "news", big)
		require.ErrorIs(t, err, store.ErrPayloadTooLarge, "NOTIFY's limit, on both engines")
		require.NoError(t, s.Notify(c, "news", []byte("after")))
		n, err = l.Recv(c)
		require.NoError(t, err)
		assert.Equal(t, "after", string(n.Payload), "the oversized one was never sent")
		require.ErrorIs(t, s.Notify(c, "", nil), store.ErrInvalidName)
		_, err = s.Listen(c, "__alk_x")
		require.ErrorIs(t, err, store.ErrReservedName)
	})
}

// TestCloseEndsEveryReceiverAndGoroutine: closing the store ends every
// receiver and listener with ErrClosed, and no goroutine outlives it.
func TestCloseEndsEveryReceiverAndGoroutine(t *testing.T) {
	eachEngineInTurn(t, func(t *testing.T, e *engineEnv) { // goleak sees every goroutine in the process
		// The harness's own processes (pgtest starting another test's
		// cluster meanwhile: os/exec's pipe copiers) are not the store's,
		// which starts none.
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), goleak.IgnoreAnyFunction("os/exec.(*Cmd).Start.func2"))
		c := ctx(t)
		s, err := store.Open(c, e.dsn)
		require.NoError(t, err)
		st := s.Stream("closing")
		publishN(t, st, 40) // fills a small buffer: one reader parks mid-drain
		busy, err := st.Subscribe(c, "busy", store.SubscribeOpts{Buffer: 2})
		require.NoError(t, err)
		idle, err := s.Stream("quiet").Subscribe(c, "idle", store.SubscribeOpts{})
		require.NoError(t, err)
		l, err := s.Listen(c, "ch")
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(c)
		defer cancel()
		workDone := make(chan error, 1)
		go func() {
			workDone <- s.Queue("q").Work(wctx, store.WorkOpts{}, func(context.Context, *store.Job) error { return nil })
		}()
		outboxDone := make(chan error, 1)
		go func() {
			outboxDone <- s.Outbox("o").Run(wctx, store.OutboxOpts{}, func(context.Context, *store.Job) error { return nil })
		}()
		sch := s.Scheduler("closing", store.SchedulerOpts{})
		schedDone := make(chan error, 1)
		go func() { schedDone <- sch.Run(wctx) }()
		require.Eventually(t, sch.Leading, 10*time.Second, time.Millisecond)
		_, err = busy.Recv(c)
		require.NoError(t, err)

		require.NoError(t, s.Close())
		// Each returns at once, not at its next poll: waiting for one's
		// safety poll (5s) would time out this one-second context.
		closing, stop := context.WithTimeout(context.Background(), time.Second)
		defer stop()
		for what, done := range map[string]chan error{"Work": workDone, "an outbox's Run": outboxDone, "a scheduler's Run": schedDone} {
			select {
			case err := <-done:
				require.ErrorIs(t, err, store.ErrClosed, what)
			case <-closing.Done():
				t.Fatalf("%s did not return when the store closed", what)
			}
		}
		for _, r := range []*store.EventReceiver{busy, idle} {
			for { // buffered events may still come out first
				_, err := r.Recv(c)
				if err != nil {
					require.ErrorIs(t, err, store.ErrClosed)
					break
				}
			}
			_, _, err = r.TryRecv(c)
			require.ErrorIs(t, err, store.ErrClosed, "closed for good")
		}
		_, err = l.Recv(c)
		require.ErrorIs(t, err, store.ErrClosed)
	})
}

// TestCrossProcessWake: another OS process publishes; a receiver here gets
// each event through the feed (Postgres NOTIFY, or SQLite's data_version
// watcher). Its safety poll is an hour, so an event the feed missed hangs
// the test until its deadline; the latency is logged, not asserted (it
// depends on the machine; `make bench` measures it).
func TestCrossProcessWake(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		r, err := s.Stream("xproc").Subscribe(c, "here", store.SubscribeOpts{SafetyPoll: time.Hour})
		require.NoError(t, err)
		defer r.Close()
		const n = 100
		cmd := startChild(c, "publish", e.dsn, "xproc", n)
		require.NoError(t, cmd.Start())
		lat := make([]time.Duration, 0, n)
		for len(lat) < n {
			ev, err := r.Recv(c)
			require.NoError(t, err)
			stamp, err := strconv.ParseInt(string(ev.Payload), 10, 64)
			require.NoError(t, err)
			lat = append(lat, time.Since(time.Unix(0, stamp)))
		}
		require.NoError(t, cmd.Wait())
		slices.Sort(lat)
		p50, p99 := lat[n/2], lat[n*99/100]
		t.Logf("%s cross-process publish → Recv: p50 %s, p99 %s", e.name, p50, p99)
	})
}

// TestReceiverSurvivesATransientReadError: while the events table is away,
// the receiver reports one database error, then resumes where it was.
func TestReceiverSurvivesATransientReadError(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		st := s.Stream("flaky")
		c := ctx(t)
		first := publishN(t, st, 1)
		table, away := "alk_events", "alk_events_away"
		if e.name == "pg" {
			table, away = "alkstore.events", "events_away"
		}
		admin := s // DDL on the same database, through the store's own transaction
		rename := func(from, to string) {
			require.NoError(t, admin.InTx(c, func(c context.Context, tx store.Tx) error {
				_, err := tx.Exec(c, "ALTER TABLE "+from+" RENAME TO "+to)
				return err
			}))
		}
		rename(table, away)
		r, err := st.Subscribe(c, "c", store.SubscribeOpts{RetryInterval: 10 * time.Millisecond})
		require.NoError(t, err)
		defer r.Close()
		_, err = r.Recv(c)
		require.Error(t, err)
		require.NotErrorIs(t, err, store.ErrClosed, "a read error is not the end")

		back := away
		if e.name == "pg" {
			back = "alkstore." + away
		}
		rename(back, strings.TrimPrefix(table, "alkstore."))
		more := publishN(t, st, 1)
		assert.Equal(t, append(first, more...), recvN(t, r, 2), "resumed in order, no second error for the same outage")
	})
}

// TestSecondStoreReceiverWakes: a receiver on one store follows events
// another store on the same database publishes, one at a time, each
// through the feed (no shared in-process wake).
func TestSecondStoreReceiverWakes(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		a := e.open(t)
		busy, err := a.Stream("other").Subscribe(ctx(t), "c", store.SubscribeOpts{}) // a's feed is already running
		require.NoError(t, err)
		defer busy.Close()
		b := e.open(t)
		r, err := b.Stream("shared").Subscribe(ctx(t), "c", store.SubscribeOpts{})
		require.NoError(t, err)
		defer r.Close()
		for i := 0; i < 50; i++ {
			off, err := a.Stream("shared").Publish(ctx(t), nil)
			require.NoError(t, err)
			ev, err := r.Recv(ctx(t))
			require.NoError(t, err, "round %d", i)
			require.Equal(t, off, ev.Offset)
		}
	})
}
