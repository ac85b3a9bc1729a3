package pgdb

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestNotifyTwinsAreTheirStatements: an enqueue or publish the wake gate
// gives a wake runs EnqueueJobNotify, PublishEventNotify or
// PublishKeyedEventNotify, every other one EnqueueJob, PublishEvent or
// PublishKeyedEvent, whose rows carry no NOTIFY (its CASE cost each
// statement 5-6k instructions whether it notified or not). Each Notify twin
// is its statement with the NOTIFY in the headers expression (the wake the
// parameter before headers) and nothing else, and a Tx's first publish
// (PublishEventWithTxid, PublishKeyedEventWithTxid) is the Notify twin
// sending its NOTIFY only for a non-empty wake and returning txid too: a
// change made to one of them (a column, a default, the horizon's order of
// txid and the offset) fails here until the others follow.
func TestNotifyTwinsAreTheirStatements(t *testing.T) {
	for _, c := range []struct {
		name, stmt, twin, withTxid string
		wake                       int // the twin's wake parameter; headers is the next
	}{
		{"EnqueueJob", enqueueJob, enqueueJobNotify, "", 8},
		{"PublishEvent", publishEvent, publishEventNotify, publishEventWithTxid, 4},
		{"PublishKeyedEvent", publishKeyedEvent, publishKeyedEventNotify, publishKeyedEventWithTxid, 4},
	} {
		notify := fmt.Sprintf("CASE WHEN pg_notify('alkstore', $%d::text) IS NULL THEN NULL ELSE $%d::text::jsonb END", c.wake, c.wake+1)
		if !strings.Contains(c.twin, notify) {
			t.Errorf("%sNotify does not notify in its headers:\n%s", c.name, c.twin)
		}
		quiet := withoutParam(strings.Replace(c.twin, notify, fmt.Sprintf("$%d::text::jsonb", c.wake+1), 1), c.wake)
		if got, want := sqlBody(quiet), sqlBody(c.stmt); got != want {
			t.Errorf("%sNotify is not %s with a NOTIFY:\n%s\nagainst\n%s", c.name, c.name, got, want)
		}
		if strings.Contains(c.stmt, "pg_notify") {
			t.Errorf("%s notifies:\n%s", c.name, c.stmt)
		}
		if c.withTxid == "" {
			continue
		}
		tx := strings.NewReplacer(fmt.Sprintf("CASE WHEN $%d::text <> '' AND pg_notify(", c.wake), "CASE WHEN pg_notify(",
			"RETURNING id, txid", "RETURNING id", "SELECT id, txid FROM ins", "SELECT id FROM ins").Replace(c.withTxid)
		if got, want := sqlBody(tx), sqlBody(c.twin); got != want {
			t.Errorf("%sWithTxid is not %sNotify with an optional wake, returning txid:\n%s\nagainst\n%s", c.name, c.name, got, want)
		}
	}
}

// withoutParam is a statement's text with its parameter $n gone from the
// numbering: each later one a number lower.
func withoutParam(s string, n int) string {
	return regexp.MustCompile(`\$[0-9]+`).ReplaceAllStringFunc(s, func(p string) string {
		k, _ := strconv.Atoi(p[1:])
		if k > n {
			k--
		}
		return "$" + strconv.Itoa(k)
	})
}
