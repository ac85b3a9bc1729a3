package litedb

import (
	"regexp"
	"testing"

	"github.com/alkstore/alkstore/internal/gencheck"
)

// TestClaimableJobsEachIsClaimableJobs: the hand-written ClaimableJobsEach
// sends ClaimableJobs's arguments in ClaimableJobs's order and scans its
// columns into the same fields, so a change of the query (regenerated)
// that this file does not follow fails here rather than binding or reading
// the wrong column.
func TestClaimableJobsEachIsClaimableJobs(t *testing.T) {
	args := regexp.MustCompile(`(?s)q\.query\(ctx, q\.claimableJobsStmt, claimableJobs,(.*?)\)\n`)
	gen, hand := gencheck.Func(t, "queues.sql.go", "ClaimableJobs"), gencheck.Func(t, "claimable_each.go", "ClaimableJobsEach")
	for _, re := range []*regexp.Regexp{args, gencheck.Scans} {
		gencheck.Same(t, "ClaimableJobs: "+re.String(), gencheck.Fields(t, re, gen), gencheck.Fields(t, re, hand))
	}
}
