// Package gencheck holds what the tests of hand-written query functions
// (db/pg's ClaimJobsEach, ReadEventsEach, db/lite's ClaimableJobsOn, ...)
// share: they read the generated function beside the hand-written one and
// check that both send the same arguments and scan the same columns, so a
// regenerated query that a hand-written file does not follow fails a test
// rather than binding or reading the wrong column.
package gencheck

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// Scans matches the destinations a generated or hand-written function
// scans a row into.
var Scans = regexp.MustCompile(`(?s)rows\.Scan\((.*?)\)|dest := \[\]any\{(.*?)\}`)

var field = regexp.MustCompile(`[&.\w]+`)

// Func returns the source of the method name of *Queries in file (of the
// test's package directory).
func Func(t testing.TB, file, name string) []byte {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fn := regexp.MustCompile(`(?s)func \(q \*Queries\) ` + regexp.QuoteMeta(name) + `\(.*?\n}\n`).Find(src)
	if fn == nil {
		t.Fatalf("no %s in %s", name, file)
	}
	return fn
}

// Fields returns the identifiers in the groups of re's first match in src.
func Fields(t testing.TB, re *regexp.Regexp, src []byte) []string {
	t.Helper()
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

// Same fails unless want (the generated function's) and got (the
// hand-written one's) are the same non-empty list.
func Same(t testing.TB, what string, want, got []string) {
	t.Helper()
	if len(want) == 0 || !slices.Equal(want, got) {
		t.Fatalf("%s: generated %q, hand-written %q", what, want, got)
	}
}
