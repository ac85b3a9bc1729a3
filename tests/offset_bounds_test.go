package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/internal/wake"
	"github.com/alkstore/alkstore/store"
)

// TestOffsetPastTheNewestIsRefused: SaveOffset, SaveOffsetTx and
// ResetOffset refuse an offset above the newest offset of any event with
// ErrInvalidArgument naming the consumer and both offsets, and store
// nothing, so the events published next reach the consumer. Before
// session 59 they stored it: the consumer skipped every event published
// until the numbering passed it, with a lag of 0 (attack59 F1).
func TestOffsetPastTheNewestIsRefused(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("orders")
		head, err := st.Publish(c, []byte("e1"))
		require.NoError(t, err)
		past := head + 1000 // an operator's extra 0, a skip "to the end" by a wrong number
		err = st.ResetOffset(c, "billing", past)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		for _, want := range []string{`"orders"`, `consumer "billing"`, fmt.Sprint(past), fmt.Sprintf("past %d", head)} {
			assert.Contains(t, err.Error(), want)
		}
		require.ErrorIs(t, st.SaveOffset(c, "audit", past), store.ErrInvalidArgument)
		require.ErrorIs(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			return st.SaveOffsetTx(c, tx, "audit", past)
		}), store.ErrInvalidArgument)
		require.NoError(t, st.SaveOffset(c, "mailer", head))
		require.ErrorIs(t, st.SaveOffset(c, "mailer", past), store.ErrInvalidArgument, "a consumer with an offset too")
		var later []int64
		for range 3 {
			off, err := st.Publish(c, []byte("later"))
			require.NoError(t, err)
			later = append(later, off)
		}
		for consumer, want := range map[string][]int64{"billing": append([]int64{head}, later...), "audit": append([]int64{head}, later...), "mailer": later} {
			evs, err := st.ReadFromConsumer(c, consumer, 10)
			require.NoError(t, err)
			assert.Equal(t, want, offsets(evs), "%s: every event published after the refusal is delivered", consumer)
		}
		stats, err := s.Streams(c)
		require.NoError(t, err)
		require.Len(t, stats, 1)
		require.Len(t, stats[0].Consumers, 1, "the refusals made no consumer")
		assert.Equal(t, "mailer", stats[0].Consumers[0].Consumer)
		assert.EqualValues(t, 3, stats[0].Consumers[0].Lag)
	})
}

// TestOffsetAReaderGotIsNeverRefused: the bound is the newest offset
// drawn for any event, never lower than an offset a reader was given: a
// consumer saves (and an operator resets to) an offset whose events were
// trimmed since, and one between the stream's last event and another
// stream's newer events, which skips nothing of its stream. Lower and
// equal saves stay silent no-ops.
func TestOffsetAReaderGotIsNeverRefused(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("orders")
		var offs []int64
		for range 3 {
			off, err := st.Publish(c, []byte("x"))
			require.NoError(t, err)
			offs = append(offs, off)
		}
		evs, err := st.ReadFromConsumer(c, "slow", 10)
		require.NoError(t, err)
		require.Len(t, evs, 3)
		n, err := st.TrimTo(c, offs[2]) // the stream's every event, the one "slow" read last included
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
		require.NoError(t, st.SaveOffset(c, "slow", offs[2]), "an offset a reader got, its event trimmed since")
		require.NoError(t, st.SaveOffset(c, "slow", offs[2]), "an equal save: a no-op")
		require.NoError(t, st.SaveOffset(c, "slow", offs[0]), "a lower save: a no-op")
		require.NoError(t, st.ResetOffset(c, "other", offs[2]), "a reset to it, the stream known by its consumer")
		got, err := st.Offset(c, "slow")
		require.NoError(t, err)
		assert.Equal(t, offs[2], got)

		busy := s.Stream("busy")
		var newest int64
		for range 5 {
			newest, err = busy.Publish(c, []byte("y"))
			require.NoError(t, err)
		}
		require.NoError(t, st.ResetOffset(c, "slow", newest), "past orders' last event, not past the newest of any stream")
		next, err := st.Publish(c, []byte("next"))
		require.NoError(t, err)
		evs, err = st.ReadFromConsumer(c, "slow", 10)
		require.NoError(t, err)
		assert.Equal(t, []int64{next}, offsets(evs), "the stream's next event comes after it: nothing skipped")
		require.ErrorIs(t, st.ResetOffset(c, "slow", next+1), store.ErrInvalidArgument)

		// An offset stored before the bound existed, past it: a lower save
		// stays a silent no-op, as it always was.
		table := map[string]string{"pg": "alkstore.consumer_offsets", "lite": "alk_consumer_offsets"}[e.name]
		e.execSQL(t, fmt.Sprintf("UPDATE %s SET committed_offset = %d WHERE consumer = 'slow'", table, next+1000))
		require.NoError(t, st.SaveOffset(c, "slow", next), "a lower save")
		require.NoError(t, st.SaveOffset(c, "slow", next+500), "a lower save, though past the newest offset")
		got, err = st.Offset(c, "slow")
		require.NoError(t, err)
		assert.Equal(t, next+1000, got)
	})
}

// TestResetOffsetOfANewStream: ResetOffset places a consumer of a stream
// nothing was published to yet (a deploy step before the first publish:
// offset 0 is always valid), as it did before session 59's f0ac1fe made it
// ErrNotFound (review59b N3); an offset past the newest is still refused.
// Stream.Exists, the CLI's and console's check before a reset, counts
// every way a stream is stored: events, a key's row, settings, a plain
// consumer and a consumer group, the last one for a stream trimmed empty
// (review59b F1: called unknown).
func TestResetOffsetOfANewStream(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		fresh := s.Stream("fresh")
		require.NoError(t, fresh.ResetOffset(c, "billing", 0), "a consumer placed before the first publish")
		head, err := s.Stream("orders").Publish(c, []byte("x"))
		require.NoError(t, err)
		require.NoError(t, s.Stream("fresh2").ResetOffset(c, "billing", head), "any offset up to the newest")
		require.ErrorIs(t, s.Stream("fresh3").ResetOffset(c, "billing", head+1), store.ErrInvalidArgument)
		first, err := fresh.Publish(c, []byte("first"))
		require.NoError(t, err)
		evs, err := fresh.ReadFromConsumer(c, "billing", 10)
		require.NoError(t, err)
		assert.Equal(t, []int64{first}, offsets(evs))

		exists := func(name string) bool {
			ok, err := s.Stream(name).Exists(c)
			require.NoError(t, err)
			return ok
		}
		assert.False(t, exists("orders-typo"))
		assert.True(t, exists("orders"), "by its event")
		assert.False(t, exists("fresh3"), "a refused reset made nothing")
		require.NoError(t, s.Stream("configured").Configure(c, store.StreamConfig{Compacted: true}))
		assert.True(t, exists("configured"), "by its settings")
		require.NoError(t, s.Stream("consumed").SaveOffset(c, "a", 0))
		assert.True(t, exists("consumed"), "by a consumer")
		_, err = s.Stream("keyed").PublishWithKey(c, "k", nil)
		require.NoError(t, err)
		_, err = s.Stream("keyed").TrimTo(c, 1<<40) // its only event goes; its key's row stays, headless
		require.NoError(t, err)
		assert.True(t, exists("keyed"), "by its key's row")

		// A stream a consumer group consumes, trimmed empty: no event, key,
		// setting or plain consumer left, only the group.
		gs := s.Stream("gorders")
		var last int64
		for range 3 {
			last, err = gs.Publish(c, []byte("y"))
			require.NoError(t, err)
		}
		m, err := gs.Group("g").Join(c, store.GroupOpts{Partitions: 1})
		require.NoError(t, err)
		for range 3 {
			ev, err := m.Recv(c)
			require.NoError(t, err)
			require.NoError(t, m.Commit(c, ev))
		}
		require.NoError(t, m.Leave(c))
		n, err := gs.TrimTo(c, last)
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
		assert.True(t, exists("gorders"), "by its consumer group")
	})
}

// TestOffsetOfAnImportedEventIsAccepted: an event row whose id is above
// the offset sequence (imported, or copied by logical replication, which
// carries no sequence values) is delivered, so its offset is saved, by
// SaveOffset and by a read-and-save in one Tx, and reset to. Before, on
// PostgreSQL, the bound was the sequence alone: the save was refused with
// "past <the sequence>", false (the event exists), and a read-then-save
// loop read the same page for ever (review59b F5). SQLite's bound counts
// max(id) already. An offset above every event and the sequence is still
// refused, saying no event has it.
func TestOffsetOfAnImportedEventIsAccepted(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("orders")
		head, id := publishThenImport(t, e, st)
		evs, err := st.ReadFromConsumer(c, "c", 10)
		require.NoError(t, err)
		require.Equal(t, []int64{head, id}, offsets(evs))
		require.NoError(t, st.SaveOffset(c, "c", id))
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			evs, err := st.ReadFromConsumerTx(c, tx, "d", 10)
			if err != nil {
				return err
			}
			return st.SaveOffsetTx(c, tx, "d", evs[len(evs)-1].Offset)
		}), "the exactly-once loop moves on")
		require.NoError(t, st.ResetOffset(c, "e", id-1), "below the imported event")
		for _, consumer := range []string{"c", "d"} {
			evs, err = st.ReadFromConsumer(c, consumer, 10)
			require.NoError(t, err)
			assert.Empty(t, evs, consumer)
		}
		err = st.SaveOffset(c, "c", id+1)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		assert.Contains(t, err.Error(), "no event has an id at or above it", "not a bound alone: an event above it would be taken")
	})
}

// TestRefusedResetSendsNoWake (PostgreSQL): a ResetOffset refused for
// being past the newest offset sends no offset wake (Store.Changes would
// signal a change that did not happen); before, the statement's NOTIFY ran
// before the bound refused the row (review59b F4). A reset that is stored
// still sends one.
func TestRefusedResetSendsNoWake(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		if e.name != "pg" {
			t.Skip("pg_notify: SQLite's Changes is in-process")
		}
		c := ctx(t)
		s := e.open(t)
		st := s.Stream("orders")
		head, err := st.Publish(c, []byte("x"))
		require.NoError(t, err)
		conn, err := pgx.Connect(c, e.dsn)
		require.NoError(t, err)
		defer conn.Close(context.Background())
		_, err = conn.Exec(c, "LISTEN alkstore")
		require.NoError(t, err)
		// heard collects the payloads that arrive before marker's.
		heard := func(marker string) []string {
			require.NoError(t, s.Notify(c, marker, []byte("m")))
			var before []string
			for {
				n, err := conn.WaitForNotification(c)
				require.NoError(t, err)
				if strings.Contains(n.Payload, marker) {
					return before
				}
				before = append(before, n.Payload)
			}
		}
		heard("start") // whatever the publish sent
		for round := range 5 {
			require.ErrorIs(t, st.ResetOffset(c, "billing", head+1000), store.ErrInvalidArgument)
			for _, p := range heard(fmt.Sprint("refused", round)) {
				assert.NotContains(t, p, "o:orders", "round %d: a refused reset sent an offset wake", round)
			}
		}
		require.NoError(t, st.ResetOffset(c, "billing", head))
		for {
			n, err := conn.WaitForNotification(c)
			require.NoError(t, err, "a stored reset's wake (or its trailing wake)")
			if strings.Contains(n.Payload, "o:orders") {
				break
			}
		}
	})
}

// TestARefusedResetLeavesTheWakeGateAsItWas (PostgreSQL): a ResetOffset
// the bound refused sent no NOTIFY, yet its wake gate marked the topic's
// wake as sent, so the next reset within the window (5 ms), a stored one
// or the refused statement's own retry with an imported event's offset,
// carried none and was announced by a trailing wake a window late
// (review59d F2). The refused reset now gives the wake back. The topic's
// window is an hour here, so a trailing wake cannot stand in for the
// reset's own NOTIFY: what the test asserts is that the stored reset's
// wake reached a LISTEN connection before a marker notification sent after
// it returned, whatever the machine's speed.
func TestARefusedResetLeavesTheWakeGateAsItWas(t *testing.T) {
	eachEngineEachForm(t, []string{"after a refused reset", "an imported event's offset"}, func(t *testing.T, e *engineEnv, form int) {
		if e.name != "pg" {
			t.Skip("the wake gate is PostgreSQL's: SQLite's watchers see every commit")
		}
		c := ctx(t)
		s := e.open(t)
		name := fmt.Sprint("refund-", form)
		st := s.Stream(name)
		topic := "o:" + name
		defer wake.SetGateWindow(topic, time.Hour)()
		l := listenWakes(t, e, topic)
		head, id := publishThenImport(t, e, st)
		if form == 0 {
			require.ErrorIs(t, st.ResetOffset(c, "billing", id+1000), store.ErrInvalidArgument)
			require.NoError(t, st.ResetOffset(c, "billing", head))
		} else {
			// Past the sequence: the first statement is refused, its retry
			// (the bound raised to the imported event's offset) stores it.
			require.NoError(t, st.ResetOffset(c, "billing", id))
		}
		marker := fmt.Sprint("marker-", name)
		require.NoError(t, s.Notify(c, marker, []byte("m")))
		woke := false
		for {
			n, err := l.conn.WaitForNotification(c)
			require.NoError(t, err)
			if strings.Contains(n.Payload, marker) {
				break
			}
			woke = woke || n.Payload == l.payload
		}
		assert.True(t, woke, "the stored reset carried its own wake (not a trailing one a window later)")
		got, err := st.Offset(c, "billing")
		require.NoError(t, err)
		assert.Equal(t, map[int]int64{0: head, 1: id}[form], got)
	})
}

// TestReceiverEqualSaveIsOneStatement: a receiver's SaveOffset of the
// position it saved already (an explicit save with nothing new since) is
// its one statement: the position is an event's offset Recv returned,
// below the bound, so a save that stored nothing is an equal save and
// needs no OffsetBounds to say so (review59b N4: two statements before).
// Stream.SaveOffset of an offset the caller gives still asks, to refuse
// one past the newest.
func TestReceiverEqualSaveIsOneStatement(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		var sc stmtCounts
		s := e.openHooked(t, sc.hook)
		c := ctx(t)
		st := s.Stream("orders")
		off, err := st.Publish(c, []byte("x"))
		require.NoError(t, err)
		rcv, err := st.Subscribe(c, "billing", store.SubscribeOpts{})
		require.NoError(t, err)
		defer rcv.Close()
		ev, err := rcv.Recv(c)
		require.NoError(t, err)
		require.Equal(t, off, ev.Offset)
		require.NoError(t, rcv.SaveOffset(c))
		saves, bounds := sc.count("SaveOffset"), sc.count("OffsetBounds")
		for range 3 {
			require.NoError(t, rcv.SaveOffset(c))
		}
		assert.Equal(t, 3, sc.count("SaveOffset")-saves)
		assert.Zero(t, sc.count("OffsetBounds")-bounds, "an equal save of a receiver's position")
		require.NoError(t, st.SaveOffset(c, "billing", off))
		assert.Equal(t, 1, sc.count("OffsetBounds")-bounds, "Stream.SaveOffset's equal save tells it from a refusal")
		got, err := st.Offset(c, "billing")
		require.NoError(t, err)
		assert.Equal(t, off, got)
	})
}

// TestASaveLocksNoEventsRelation (PostgreSQL): SaveOffset, the receivers'
// auto-save, names no events relation in its statement. With a probe of
// alkstore.events in it (review59b F5's first fix: "or an event has an id
// at or above it", evaluated only when the sequence refused), every save
// still locked the events partitions and their indexes: a generic plan,
// which pgx's statement cache gets after five executions, locks every
// relation it names whether or not a subquery runs (80 relation locks a
// save with 40 partitions, 64 of them outside the fast path, and 2.4 to
// 3.9 times the server CPU: review59c F1). An imported event's offset is
// still taken (TestOffsetOfAnImportedEventIsAccepted): the follow-up
// FirstEventFrom finds it and the save goes again. Equal saves, which run
// OffsetBounds to tell them from a refusal, lock none either: it looked
// for the highest event on every partition until review59d F3.
func TestASaveLocksNoEventsRelation(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		if e.name != "pg" {
			t.Skip("relation locks of PostgreSQL's plans; SQLite locks its file, not tables")
		}
		c := ctx(t)
		s := e.open(t)
		st := s.Stream("orders")
		var last int64
		for range 10 {
			off, err := st.Publish(c, []byte("x"))
			require.NoError(t, err)
			last = off
		}
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error {
			for i := range 8 { // past pgx's five custom plans
				if err := st.SaveOffsetTx(c, tx, "c", last-7+int64(i)); err != nil {
					return err
				}
			}
			for range 8 { // equal saves: OffsetBounds tells them from a refusal
				if err := st.SaveOffsetTx(c, tx, "c", last); err != nil {
					return err
				}
			}
			var locked []string
			rows, err := tx.Query(c, `SELECT r.relname::text FROM pg_locks l JOIN pg_class r ON r.oid = l.relation
				WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation'
				  AND r.relnamespace = 'alkstore'::regnamespace AND r.relname LIKE 'events%'`)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var name string
				if err := rows.Scan(&name); err != nil {
					return err
				}
				locked = append(locked, name)
			}
			assert.Empty(t, locked, "the saves locked events relations")
			return rows.Err()
		}))
		got, err := st.Offset(c, "c")
		require.NoError(t, err)
		assert.Equal(t, last, got)
	})
}

// TestAReceiversSaveOfATrimmedImportedEvent: an event imported above the
// offset sequence is delivered, then trimmed, and only then does the
// receiver save its position: the save stores it (a position Recv
// returned is an event's, whatever the sequence says). Before, the save
// was bounded by the sequence (and, on PostgreSQL, the events left at or
// above it: none), stored nothing and returned nil, and the receiver took
// its position as saved (review59c F3).
func TestAReceiversSaveOfATrimmedImportedEvent(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		st := s.Stream("orders")
		head, id := publishThenImport(t, e, st)
		rcv, err := st.Subscribe(c, "c", store.SubscribeOpts{})
		require.NoError(t, err)
		defer rcv.Close()
		var got []int64
		for len(got) < 2 {
			ev, err := rcv.Recv(c)
			require.NoError(t, err)
			got = append(got, ev.Offset)
		}
		require.Equal(t, []int64{head, id}, got)
		_, err = st.TrimTo(c, id)
		require.NoError(t, err)
		require.NoError(t, rcv.SaveOffset(c))
		off, err := st.Offset(c, "c")
		require.NoError(t, err)
		assert.Equal(t, id, off, "the receiver's save stored nothing")
	})
}

// publishThenImport publishes one event to st, then writes a second one
// by hand 100 offsets above it, past the offset sequence (an import, or a
// copy by logical replication, which carries no sequence values), and
// returns both offsets.
func publishThenImport(t *testing.T, e *engineEnv, st *store.Stream) (head, id int64) {
	t.Helper()
	head, err := st.Publish(ctx(t), []byte("x"))
	require.NoError(t, err)
	id = head + 100
	if e.name == "pg" {
		e.execSQL(t, fmt.Sprintf("INSERT INTO alkstore.events (id, stream, payload, txid) VALUES (%d, '%s', 'imported', pg_current_xact_id())", id, st.Name()))
	} else {
		e.execSQL(t, fmt.Sprintf("INSERT INTO alk_events (id, stream, payload) VALUES (%d, '%s', 'imported')", id, st.Name()))
	}
	return head, id
}
