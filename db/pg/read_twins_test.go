package pgdb

import (
	"regexp"
	"strings"
	"testing"

	"github.com/alkstore/alkstore/internal/gencheck"
)

// TestReadEventsOutsideTxIsReadEvents: a read outside a transaction runs
// ReadEventsOutsideTx (store/stream_pg.go, readSettled), every other read
// ReadEvents. The twin is ReadEvents with its page cut at the horizon
// (upto), without the lookup of the transaction's own events, and without
// the transaction's id (an auto-commit read takes none: the id is NULL,
// the snapshot's byte says so, the horizon's condition on it holds, and
// every event's txid, NOT NULL, is distinct from it), and nothing else; it
// takes the same arguments and returns the same columns, which
// ReadEventsOutsideTxEach reads with ReadEventsEach's code, parameters and
// row. So a change made to one of the two fails here until the other
// follows.
func TestReadEventsOutsideTxIsReadEvents(t *testing.T) {
	own := regexp.MustCompile(`(?s)GREATEST\(h\.horizon, CASE WHEN h\.own IS NOT NULL THEN.*?END\)::bigint AS upto`)
	if n := len(own.FindAllString(readEvents, -1)); n != 1 {
		t.Fatalf("ReadEvents has %d lookups of the transaction's own events, want 1:\n%s", n, readEvents)
	}
	want := own.ReplaceAllString(readEvents, "h.horizon AS upto")
	for _, d := range []struct{ with, without string }{
		{"snap.visible_head, snap.own, ", "snap.visible_head, "},
		{" AND snap.own IS NULL", ""},
		{" AND v.txid IS DISTINCT FROM pg_current_xact_id_if_assigned()", ""},
		{",\n               pg_current_xact_id_if_assigned() AS own\n", "\n"},
		{"boolsend(h.own IS NOT NULL)", "boolsend(false)"},
	} {
		if n := strings.Count(want, d.with); n != 1 {
			t.Fatalf("ReadEvents has %q %d times, want once:\n%s", d.with, n, readEvents)
		}
		want = strings.Replace(want, d.with, d.without, 1)
	}
	if got, want := sqlBody(readEventsOutsideTx), sqlBody(want); got != want {
		t.Errorf("ReadEventsOutsideTx is not ReadEvents cut at the horizon:\n%s\nagainst\n%s", got, want)
	}
	gen, twin := gencheck.Func(t, "streams.sql.go", "ReadEvents"), gencheck.Func(t, "streams.sql.go", "ReadEventsOutsideTx")
	args := func(stmt string) *regexp.Regexp {
		return regexp.MustCompile(`(?s)q\.db\.Query\(ctx, ` + stmt + `,(.*?)\)\n`)
	}
	gencheck.Same(t, "arguments", gencheck.Fields(t, args("readEvents"), gen), gencheck.Fields(t, args("readEventsOutsideTx"), twin))
	gencheck.Same(t, "columns", gencheck.Fields(t, gencheck.Scans, gen), gencheck.Fields(t, gencheck.Scans, twin))
}
