package pgdb

import (
	"strings"
	"testing"
)

// TestPublishWithTxidTwinsArePublishes: a Tx's first publish runs
// PublishEventWithTxid, PublishEventsWithTxid or PublishKeyedEventWithTxid
// (for the transaction id, store/engine_pg.go, offering); every other
// publish runs the statement without it. Each twin is its statement
// returning txid too, and nothing else, so a change made to one of the two
// (a column, the wake, the order of txid and the offset) fails here until
// the other follows.
func TestPublishWithTxidTwinsArePublishes(t *testing.T) {
	// The twin's returning lists, as the statement's.
	without := strings.NewReplacer(
		"RETURNING id, txid", "RETURNING id",
		"RETURNING id, key, txid", "RETURNING id, key",
		"RETURNING id, key, payload IS NULL AS tomb, txid", "RETURNING id, key, payload IS NULL AS tomb",
		"SELECT ins.id, ins.txid FROM ins", "SELECT ins.id FROM ins",
		"SELECT id, txid FROM ins", "SELECT id FROM ins")
	for _, c := range []struct{ name, stmt, twin string }{
		// PublishEventWithTxid's wake: TestNotifyTwinsAreTheirStatements.
		{"PublishEventNotify", publishEventNotify, strings.Replace(publishEventWithTxid,
			"CASE WHEN $4::text <> '' AND pg_notify(", "CASE WHEN pg_notify(", 1)},
		{"PublishEvents", publishEvents, publishEventsWithTxid},
		{"PublishKeyedEventNotify", publishKeyedEventNotify, strings.Replace(publishKeyedEventWithTxid,
			"CASE WHEN $4::text <> '' AND pg_notify(", "CASE WHEN pg_notify(", 1)},
	} {
		if !strings.Contains(c.twin, "txid FROM ins") && !strings.Contains(c.twin, "RETURNING id, txid") {
			t.Errorf("%sWithTxid returns no txid:\n%s", c.name, c.twin)
		}
		if got, want := sqlBody(without.Replace(c.twin)), sqlBody(c.stmt); got != want {
			t.Errorf("%sWithTxid is not %s returning txid too:\n%s\nagainst\n%s", c.name, c.name, got, want)
		}
	}
}

// sqlBody is a generated statement's text without its name line and blank
// lines (sqlc keeps a blank line where a comment was).
func sqlBody(s string) string {
	var b strings.Builder
	for i, l := range strings.Split(s, "\n") {
		if i == 0 || strings.TrimSpace(l) == "" {
			continue
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}
