package litedb

import (
	"strings"
	"testing"
)

// TestPublishWithTxidTwinsArePublishes: SQLite has no horizon, so the
// twins PostgreSQL's Tx publish needs (queries/pg: they also return the
// transaction id) are the same statements here, kept so both dialects keep
// the same query names; so are the twins that send a wake with NOTIFY
// (EnqueueJobNotify, PublishEventNotify, PublishKeyedEventNotify: SQLite
// wakes in the process).
func TestPublishWithTxidTwinsArePublishes(t *testing.T) {
	for _, c := range []struct{ name, stmt, twin string }{
		{"PublishEvent", publishEvent, publishEventWithTxid},
		{"PublishEvent", publishEvent, publishEventNotify},
		{"EnqueueJob", enqueueJob, enqueueJobNotify},
		{"PublishEvents", publishEvents, publishEventsWithTxid},
		{"PublishKeyedEvent", publishKeyedEvent, publishKeyedEventWithTxid},
		{"PublishKeyedEvent", publishKeyedEvent, publishKeyedEventNotify},
	} {
		if got, want := sqlBody(c.twin), sqlBody(c.stmt); got != want {
			t.Errorf("%sWithTxid is not %s:\n%s\nagainst\n%s", c.name, c.name, got, want)
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
