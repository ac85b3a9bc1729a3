package tests

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestPublishOffsetsBesideATriggersEvents: an application's trigger that
// publishes an event of its own for each event of a stream (an audit
// trail) takes offsets between the stream's: Publish, PublishMessage,
// PublishMany and their Tx forms still return the offsets of the caller's
// events, each stored once beside its audit event. On SQLite a publish
// reads its offset from the statement's last_insert_rowid (no RETURNING),
// which the trigger's own insert changes only while the trigger runs; an
// offset read from the stream's AUTOINCREMENT counter, or the newest
// event, would be the audit event's.
func TestPublishOffsetsBesideATriggersEvents(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		main, audit := s.Stream("main"), s.Stream("audit")
		if e.name == "pg" {
			e.execSQL(t, `CREATE FUNCTION public.test_audit() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN IF NEW.stream = 'main' THEN INSERT INTO alkstore.events (id, stream, payload, txid)
				VALUES (nextval('alkstore.event_offset_seq'), 'audit', NEW.payload, pg_current_xact_id()); END IF; RETURN NULL; END $$`,
				`CREATE TRIGGER test_audit AFTER INSERT ON alkstore.events FOR EACH ROW EXECUTE FUNCTION public.test_audit()`)
		} else {
			e.execSQL(t, `CREATE TRIGGER test_audit AFTER INSERT ON alk_events WHEN NEW.stream = 'main' BEGIN
				INSERT INTO alk_events (stream, payload) VALUES ('audit', NEW.payload); END`)
		}
		var want []int64
		var payloads []string
		add := func(off int64, err error) {
			t.Helper()
			require.NoError(t, err)
			want = append(want, off)
			payloads = append(payloads, fmt.Sprintf("e%d", len(payloads)))
		}
		next := func() []byte { return fmt.Appendf(nil, "e%d", len(payloads)) }
		add(main.Publish(c, next()))
		add(main.PublishMessage(c, store.Message{Payload: next(), Headers: map[string]string{"h": "v"}}))
		many, err := main.PublishMany(c, []store.Message{{Payload: []byte(fmt.Sprintf("e%d", len(payloads)))},
			{Payload: []byte(fmt.Sprintf("e%d", len(payloads)+1))}, {Payload: []byte(fmt.Sprintf("e%d", len(payloads)+2))}})
		require.NoError(t, err)
		for _, off := range many {
			add(off, nil)
		}
		require.NoError(t, s.InTx(c, func(ctx context.Context, tx store.Tx) error {
			add(main.PublishTx(ctx, tx, next()))
			many, err := main.PublishManyTx(ctx, tx, []store.Message{{Payload: []byte(fmt.Sprintf("e%d", len(payloads)))},
				{Payload: []byte(fmt.Sprintf("e%d", len(payloads)+1))}})
			require.NoError(t, err)
			for _, off := range many {
				add(off, nil)
			}
			return nil
		}))

		evs, err := main.ReadSince(c, 0, 100)
		require.NoError(t, err)
		assert.Equal(t, want, offsets(evs), "the offsets returned are the stream's events'")
		for i, ev := range evs {
			assert.Equal(t, payloads[i], string(ev.Payload), "event %d", i)
		}
		auditEvs, err := audit.ReadSince(c, 0, 100)
		require.NoError(t, err)
		require.Len(t, auditEvs, len(want), "one audit event a published event")
		for i, ev := range auditEvs {
			assert.Equal(t, payloads[i], string(ev.Payload), "audit event %d", i)
			assert.NotContains(t, want, ev.Offset, "audit event %d's offset was returned as a publish's", i)
		}
	})
}
