package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestDSNShortPasswordKeepsTheErrorLegible: a short password (a letter, a
// word the error holds) is scrubbed where it reads as the DSN's value, not
// wherever its letters occur. The password "a" masked every "a" of the
// error ("fxxxxxiled to connect"), "dial" every "dial tcp" (review52). The
// password still never shows beside the DSN it came from.
func TestDSNShortPasswordKeepsTheErrorLegible(t *testing.T) {
	parallelTest(t)
	cliBin(t)
	for _, pw := range []string{"a", "dial", "conn", "tcp"} {
		for _, tc := range []struct {
			shape   string
			want    []string // in the error, whole
			cliWant []string // in the command's, when it differs
		}{
			{"postgres://bob:%s@127.0.0.1:1/db?connect_timeout=1",
				[]string{"failed to connect to `user=bob database=db`", "dial error: dial tcp 127.0.0.1:1: connect: connection refused"}, nil},
			{"host=127.0.0.1 port=1 user=bob password=%s dbname=db connect_timeout=1",
				[]string{"failed to connect to `user=bob database=db`", "dial error: dial tcp 127.0.0.1:1: connect: connection refused"}, nil},
			{"postgres://bob@127.0.0.1:1/db?connect_timeout=1&password=%s",
				[]string{"failed to connect to `user=bob database=db`", "dial error: dial tcp 127.0.0.1:1: connect: connection refused"}, nil},
			// Read as an SQLite file name (its scheme left out): the error
			// quotes the name, the password masked in it.
			// The command line refuses a missing file before it opens it
			// (it would create one).
			{"app:%s@localhost/no/such/dir/app.db",
				[]string{"unable to open database file", "app:xxxxx@localhost"},
				[]string{"no SQLite database at", "app:xxxxx@localhost"}},
			// Its keys capitalised, with spaces around '=' as libpq
			// allows: the password showed (review53a).
			{"Host=localhost Password = %s dbname=no/such/dir",
				[]string{"unable to open database file", "Password = xxxxx dbname"},
				[]string{"no SQLite database at", "Password = xxxxx dbname"}},
		} {
			dsn := fmt.Sprintf(tc.shape, pw)
			c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := store.Open(c, dsn, store.WithoutMigrate())
			cancel()
			require.Error(t, err, dsn)
			r := runCLI(t, "", "--dsn", dsn, "stats")
			assert.Equal(t, 1, r.code, dsn)
			for where, text := range map[string]string{"store.Open": err.Error(), "alkstore stats": r.err} {
				want := tc.want
				if where == "alkstore stats" && tc.cliWant != nil {
					want = tc.cliWant
				}
				for _, w := range want {
					assert.Contains(t, text, w, "%s on %q", where, dsn)
				}
				for _, ctx := range []string{":" + pw + "@", "=" + pw + " ", "= " + pw + " ", "=" + pw + "&", "=" + pw + "\n"} {
					assert.NotContains(t, text, ctx, "%s on %q shows the password", where, dsn)
				}
				if !strings.Contains(tc.shape, "localhost") {
					assert.NotContains(t, text, "xxxxx", "%s on %q masked what is not the password", where, dsn)
				}
			}
		}
	}
}
