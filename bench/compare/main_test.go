package main

import (
	"maps"
	"testing"

	"github.com/stretchr/testify/require"
)

// A scale table (as bench's scale section prints it) pairs each row's cost
// at each size under its own name, so the two builds' runs pair by name; a
// plain row beside it still reads as one figure.
func TestParseTableReadsEachSizeOfAScaleTable(t *testing.T) {
	out := []byte(`engine   measurement                                        alkstore        raw SQL   ratio
pg       publish, 1 publisher(s) (events/s)                     6093           7556    0.81

engine   scale: cost beside N unrelated rows               N=1e+05    N=1e+06      ×    N=1e+07      ×
pg       Publish, 1 publisher (µs)                             159        168   1.06        262   1.65
pg       Publish, 8 publishers (events/s)                    20641      18673   1.11      11035   1.87
pg       (× is the cost beside the first size: 1.00 flat, above 1 slower; goal ≤ 1.5 at 1e7; run took 3m1s)
`)
	got := maps.Collect(parseTable(out))
	require.Equal(t, map[string]sample{
		"pg publish, 1 publisher(s) (events/s)":          {6093, "/s", false},
		"pg Publish, 1 publisher (µs) at N=1e+05":        {159, "µs", true},
		"pg Publish, 1 publisher (µs) at N=1e+06":        {168, "µs", true},
		"pg Publish, 1 publisher (µs) at N=1e+07":        {262, "µs", true},
		"pg Publish, 8 publishers (events/s) at N=1e+05": {20641, "events/s", false},
		"pg Publish, 8 publishers (events/s) at N=1e+06": {18673, "events/s", false},
		"pg Publish, 8 publishers (events/s) at N=1e+07": {11035, "events/s", false},
	}, got)
}
