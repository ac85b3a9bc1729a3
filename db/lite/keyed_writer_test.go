package litedb

import (
	"regexp"
	"testing"

	"github.com/alkstore/alkstore/internal/gencheck"
)

// TestKeyedWriterIsGenerated: the hand-written PublishKeyedEventOn and
// UpsertCompactionHeadOn run the generated functions' statements with
// their arguments in their order, so a change of either query
// (regenerated) that keyed_writer.go does not follow fails here rather
// than binding the wrong parameter.
func TestKeyedWriterIsGenerated(t *testing.T) {
	gen := regexp.MustCompile(`(?s)q\.exec\(ctx, q\.\w+Stmt, (\w+),(.*?)\)\n`)
	hand := regexp.MustCompile(`(?s)w\.Exec\((\w+),(.*?)\)\n`)
	for _, name := range []string{"PublishKeyedEvent", "UpsertCompactionHead"} {
		g := gencheck.Fields(t, gen, gencheck.Func(t, "compaction.sql.go", name))
		h := gencheck.Fields(t, hand, gencheck.Func(t, "keyed_writer.go", name+"On"))
		gencheck.Same(t, name, g, h)
	}
}
