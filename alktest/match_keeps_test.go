package alktest_test

import (
	"runtime"
	"testing"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/alktest"
	"github.com/alkstore/alkstore/store"
)

// TestPayloadMatchKeepsNothingOutsideAnAssertion: a Payload match called
// on its own (a helper filtering jobs it read, say) keeps none of the jobs
// it turns down: each is garbage once the caller dropped it. Before
// (attack58), the match kept each one, payload and all, in a map that only
// alktest's own scans emptied, so a long test process grew by every job
// turned down. A weak pointer says whether anything still holds the job.
func TestPayloadMatchKeepsNothingOutsideAnAssertion(t *testing.T) {
	type payload struct{ N int }
	match := alktest.Payload(payload{N: 1})
	turnedDown := make([]weak.Pointer[store.Job], 0, 100)
	for i := range 100 {
		j := &store.Job{ID: int64(i + 1), Payload: make([]byte, 64<<10)}
		require.False(t, match(j, payload{N: 2}))
		turnedDown = append(turnedDown, weak.Make(j))
	}
	runtime.GC()
	kept := 0
	for _, w := range turnedDown {
		if w.Value() != nil {
			kept++
		}
	}
	require.Zero(t, kept, "the match kept %d of the 100 jobs it turned down", kept)
}
