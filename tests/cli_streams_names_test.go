package tests

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCLIStreamCommandsRefuseABadNameAlike: a stream name the library
// refuses (empty, too long, a control character, the reserved prefix) is
// bad input, exit 2, for every streams command that takes one; consumers
// exited 3 (not found) where tail exited 2 (review52). A good name of no
// stream is still not found.
func TestCLIStreamCommandsRefuseABadNameAlike(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		cliBin(t)
		for _, name := range []string{"a\x01b", "", strings.Repeat("x", 256), "__alkx"} {
			for _, cmd := range [][]string{{"streams", "consumers", name}, {"streams", "tail", name}, {"streams", "heads", name},
				{"streams", "reset", name, "billing", "0"}} {
				r := runCLI(t, "", append([]string{"--dsn", e.dsn}, cmd...)...)
				assert.Equal(t, 2, r.code, "alkstore %s %q: %s", cmd[1], name, r.err)
				assert.Regexp(t, `invalid name|reserved name`, r.err, "alkstore %s %q", cmd[1], name)
			}
		}
		r := runCLI(t, "", "--dsn", e.dsn, "streams", "consumers", "no-such-stream")
		assert.Equal(t, 3, r.code, r.err)
		assert.Contains(t, r.err, "not found")
	})
}
