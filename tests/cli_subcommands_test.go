package tests

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCLIUnknownSubcommandIsBadInput: an unknown command, at the top or
// in any command group (completion too), or as help's topic, exits 2 (bad
// input) with an error naming it, never the group's help with exit 0.
// Known ones still work: help's topic, a completion script.
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
			// The commands cobra adds itself, after the groups were made
			// to refuse unknown words: they exited 0 (review52).
			{[]string{"completion", "bogus"}, "bogus"},
			{[]string{"help", "bogus"}, "bogus"},
			{[]string{"help", "migrate", "down"}, "down"},
			// Words past a command without subcommands are no topic
			// either: enqueue's help, exit 0 (noticed53).
			{[]string{"help", "queues", "enqueue", "extra"}, "extra"},
			{[]string{"help", "migrate", "status", "now", "later"}, "now"},
		} {
			args := tc.args
			r := runCLI(t, "", append([]string{"--dsn", e.dsn}, args...)...)
			name := strings.Join(args, " ")
			assert.Equal(t, 2, r.code, "alkstore %s: %s%s", name, r.out, r.err)
			assert.Contains(t, r.err, `unknown command "`+tc.unknown+`"`, "alkstore %s", name)
			assert.Empty(t, r.out, "alkstore %s printed help", name)
		}
		for _, args := range [][]string{{"help", "migrate", "status"}, {"completion", "bash"}, {"help"}} {
			r := runCLI(t, "", args...)
			assert.Equal(t, 0, r.code, "alkstore %v: %s", args, r.err)
			assert.NotEmpty(t, r.out, "alkstore %v", args)
		}
	})
}
