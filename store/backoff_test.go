package store

import (
	"testing"
	"time"
)

// DefaultBackoff promises that retries of one job never get closer together
// and never wait more than an hour: every draw for attempt n+1 is at least
// every draw for attempt n, at the cap too.
func TestDefaultBackoffNeverGetsCloserTogether(t *testing.T) {
	const draws = 2000
	prevMax := time.Duration(0)
	for attempt := 1; attempt <= 40; attempt++ {
		lo, hi := time.Duration(1<<62), time.Duration(0)
		for range draws {
			d := DefaultBackoff(attempt)
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo <= 0 || hi > time.Hour {
			t.Fatalf("attempt %d: delays %s..%s, want within (0, 1h]", attempt, lo, hi)
		}
		if lo < prevMax {
			t.Fatalf("attempt %d drew %s, sooner than attempt %d's %s", attempt, lo, attempt-1, prevMax)
		}
		prevMax = hi
	}
}
