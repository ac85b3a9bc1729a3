package pgdb

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestAckJobsTextIsAckJobs: AckJobsText sends AckJobs's statement with
// AckJobs's arguments in AckJobs's order, its ids (as text) where AckJobs
// sends arg.Ids and its claims (as text) where AckJobs sends arg.Claims,
// and scans one bigint[] as AckJobs does.
func TestAckJobsTextIsAckJobs(t *testing.T) {
	generated, err := os.ReadFile("queues.sql.go")
	if err != nil {
		t.Fatal(err)
	}
	handWritten, err := os.ReadFile("ack_jobs_text.go")
	if err != nil {
		t.Fatal(err)
	}
	fn := regexp.MustCompile(`(?s)func \(q \*Queries\) AckJobs\(.*?\n}\n`).Find(generated)
	if fn == nil {
		t.Fatal("no AckJobs in queues.sql.go")
	}
	args := regexp.MustCompile(`(?s)q\.db\.QueryRow\(ctx, ackJobs,(.*?)\)\n`)
	scanned := regexp.MustCompile(`var \w+ (\S+)\n\s*err := row\.Scan\(&\w+\)`)
	field := regexp.MustCompile(`[.\w]+`)
	list := func(src []byte) []string {
		m := args.FindSubmatch(src)
		if m == nil {
			t.Fatalf("%s: not found", args)
		}
		var out []string
		for _, f := range field.FindAll(m[1], -1) {
			out = append(out, string(f))
		}
		return out
	}
	want, got := list(fn), list(handWritten)
	if i := slices.Index(want, "arg.Ids"); i >= 0 {
		want[i] = "ids"
	}
	if i := slices.Index(want, "arg.Claims"); i >= 0 {
		want[i] = "claims"
	}
	if !slices.Equal(want, got) {
		t.Fatalf("AckJobs sends %q, AckJobsText %q", want, got)
	}
	w, g := scanned.FindSubmatch(fn), scanned.FindSubmatch(handWritten)
	if w == nil || g == nil || string(w[1]) != string(g[1]) {
		t.Fatalf("AckJobs scans %q, AckJobsText %q", w, g)
	}
}
