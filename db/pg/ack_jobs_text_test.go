package pgdb

import (
	"regexp"
	"slices"
	"testing"

	"github.com/alkstore/alkstore/internal/gencheck"
)

// TestAckJobsTextIsAckJobs: AckJobsText sends AckJobs's statement with
// AckJobs's arguments in AckJobs's order, its ids (as text) where AckJobs
// sends arg.Ids and its claims (as text) where AckJobs sends arg.Claims,
// and scans one bigint[] as AckJobs does.
func TestAckJobsTextIsAckJobs(t *testing.T) {
	gen, hand := gencheck.Func(t, "queues.sql.go", "AckJobs"), gencheck.Func(t, "ack_jobs_text.go", "AckJobsText")
	args := regexp.MustCompile(`(?s)q\.db\.QueryRow\(ctx, ackJobs,(.*?)\)\n`)
	want, got := gencheck.Fields(t, args, gen), gencheck.Fields(t, args, hand)
	if i := slices.Index(want, "arg.Ids"); i >= 0 {
		want[i] = "ids"
	}
	if i := slices.Index(want, "arg.Claims"); i >= 0 {
		want[i] = "claims"
	}
	gencheck.Same(t, "AckJobs's arguments", want, got)
	scanned := regexp.MustCompile(`var \w+ (\S+)\n\s*err := row\.Scan\(&\w+\)`)
	w, g := scanned.FindSubmatch(gen), scanned.FindSubmatch(hand)
	if w == nil || g == nil || string(w[1]) != string(g[1]) {
		t.Fatalf("AckJobs scans %q, AckJobsText %q", w, g)
	}
}
