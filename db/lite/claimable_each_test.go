package litedb

import (
	"os"
	"regexp"
	"testing"
)

// TestClaimableJobsEachIsClaimableJobs: the hand-written ClaimableJobsEach sends
// ClaimableJobs's arguments in ClaimableJobs's order and scans its columns into
// the same fields, so a change of the query (regenerated) that this file
// does not follow fails here rather than binding or reading the wrong
// column.
func TestClaimableJobsEachIsClaimableJobs(t *testing.T) {
	args := regexp.MustCompile(`(?s)q\.query\(ctx, q\.claimableJobsStmt, claimableJobs,(.*?)\)\n`)
	scans := regexp.MustCompile(`(?s)rows\.Scan\((.*?)\)|dest := \[\]any\{(.*?)\}`)
	generated, err := os.ReadFile("queues.sql.go")
	if err != nil {
		t.Fatal(err)
	}
	handWritten, err := os.ReadFile("claimable_each.go")
	if err != nil {
		t.Fatal(err)
	}
	fn := regexp.MustCompile(`(?s)func \(q \*Queries\) ClaimableJobs\(.*?\n}\n`).Find(generated)
	if fn == nil {
		t.Fatal("no ClaimableJobs in queues.sql.go")
	}
	field := regexp.MustCompile(`[&.\w]+`)
	list := func(re *regexp.Regexp, src []byte) []string {
		m := re.FindSubmatch(src)
		if m == nil {
			t.Fatalf("%s: not found", re)
		}
		var out []string
		for _, g := range m[1:] {
			for _, f := range field.FindAll(g, -1) {
				out = append(out, string(f))
			}
		}
		return out
	}
	for _, re := range []*regexp.Regexp{args, scans} {
		want, got := list(re, fn), list(re, handWritten)
		if len(want) == 0 || len(want) != len(got) {
			t.Fatalf("%s: ClaimableJobs has %q, ClaimableJobsEach %q", re, want, got)
		}
		for i := range want {
			if want[i] != got[i] {
				t.Fatalf("%s: ClaimableJobs has %q, ClaimableJobsEach %q", re, want, got)
			}
		}
	}
}
