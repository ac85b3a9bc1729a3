package tests

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCLIUnknownSubcommandIsBadInput: an unknown command, at the top or
// in any command group, exits 2 (bad input) with an error naming it,
// never the group's help with exit 0.
func TestCLIUnknownSubcommandIsBadInput(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		cliBin(t)
		for _, tc := range []struct {
			args    []string
			unknown string
		}{
			{[]string{"bogus"}, "bogus"},
			{[]string{"migrate", "down"}, "down"},
			{[]string{"streams", "bogus"}, "bogus"},
			{[]string{"queues", "purge", "emails"}, "purge"},
			{[]string{"schedules", "bogus"}, "bogus"},
			{[]string{"groups", "bogus"}, "bogus"},
			{[]string{"stream", "bogus"}, "bogus"}, // a group's alias
		} {
			args := tc.args
			r := runCLI(t, "", append([]string{"--dsn", e.dsn}, args...)...)
			name := strings.Join(args, " ")
			assert.Equal(t, 2, r.code, "alkstore %s: %s%s", name, r.out, r.err)
			assert.Contains(t, r.err, `unknown command "`+tc.unknown+`"`, "alkstore %s", name)
			assert.Empty(t, r.out, "alkstore %s printed help", name)
		}
	})
}
