package pgdb

import (
	"strings"
	"testing"
)

// TestNotifyTwinsAreTheirStatements: an enqueue or publish the wake gate
// gives a wake runs EnqueueJobNotify or PublishEventNotify, every other one
// EnqueueJob or PublishEvent, whose rows carry no NOTIFY (its CASE cost
// each statement 5.2k instructions whether it notified or not). Each
// Notify twin is its statement with the NOTIFY in the headers expression
// (the wake one parameter before headers) and nothing else, and a Tx's
// first publish, PublishEventWithTxid, is PublishEventNotify sending its
// NOTIFY only for a non-empty wake and returning txid too: a change made to
// one of them (a column, a default, the horizon's order of txid and the
// offset) fails here until the others follow.
func TestNotifyTwinsAreTheirStatements(t *testing.T) {
	for _, c := range []struct {
		name, stmt, twin string
		wake, headers    string // the twin's parameters; headers is the statement's wake
	}{
		{"EnqueueJob", enqueueJob, enqueueJobNotify, "$8", "$9"},
		{"PublishEvent", publishEvent, publishEventNotify, "$4", "$5"},
	} {
		notify := "CASE WHEN pg_notify('alkstore', " + c.wake + "::text) IS NULL THEN NULL ELSE " + c.headers + "::text::jsonb END"
		if !strings.Contains(c.twin, notify) {
			t.Errorf("%sNotify does not notify in its headers:\n%s", c.name, c.twin)
		}
		quiet := strings.Replace(c.twin, notify, c.wake+"::text::jsonb", 1)
		if got, want := sqlBody(quiet), sqlBody(c.stmt); got != want {
			t.Errorf("%sNotify is not %s with a NOTIFY:\n%s\nagainst\n%s", c.name, c.name, got, want)
		}
		if strings.Contains(c.stmt, "pg_notify") {
			t.Errorf("%s notifies:\n%s", c.name, c.stmt)
		}
	}
	tx := strings.NewReplacer("CASE WHEN $4::text <> '' AND pg_notify(", "CASE WHEN pg_notify(",
		"RETURNING id, txid", "RETURNING id").Replace(publishEventWithTxid)
	if got, want := sqlBody(tx), sqlBody(publishEventNotify); got != want {
		t.Errorf("PublishEventWithTxid is not PublishEventNotify with an optional wake, returning txid:\n%s\nagainst\n%s", got, want)
	}
}
