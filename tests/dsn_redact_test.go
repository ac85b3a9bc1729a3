package tests

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// dsnPasswords are passwords whose every 4-character fragment is
// distinctive, each holding a character some DSN syntax gives a meaning
// (the userinfo's '@' and ':', a URL's '/', '?', '#', '&' and '=', a
// percent-escape, key=value's spaces and quotes).
var dsnPasswords = []string{
	"Qx7v@Wm3k",
	"Qx7v:Wm3k",
	"Qx7v/Wm3k",
	"Qx7v?Wm3k",
	"Qx7v#Wm3k",
	"Qx7v%40Wm3k",
	"Qx7v Wm3k",
	"Qx7v'Wm3k",
	"Qx7v@Wm3k:Zp9t/Kd4r?Hf6s#Jt2u%40Lr5w=Np8q&Yb2c",
}

// dsnShapes are the DSN forms, each with one %s for the password: URLs
// that do not parse and URLs and key=value DSNs that parse but cannot
// connect (nothing listens on port 1).
var dsnShapes = []string{
	"postgres://bob:%s@127.0.0.1:99999/db",
	"postgres://bob:%s@127.0.0.1:1/db?connect_timeout=1",
	"postgresql://bob:%s@localhost:1/db?connect_timeout=1&sslmode=disable",
	"postgres://bob@127.0.0.1:1/db?connect_timeout=1&password=%s",
	"host=127.0.0.1 port=1 user=bob password=%s dbname=db connect_timeout=1",
	"host=127.0.0.1 port=99999 user=bob password='%s' dbname=db",
	"host=127.0.0.1 port=1 user=bob password='%s' dbname=db connect_timeout=1",
}

// passwordFragments is every 4-character piece of pw as written and as
// percent-decoded.
func passwordFragments(pw string) []string {
	forms := []string{pw}
	if d, err := url.PathUnescape(pw); err == nil && d != pw {
		forms = append(forms, d)
	}
	var out []string
	for _, f := range forms {
		for i := 0; i+4 <= len(f); i++ {
			out = append(out, f[i:i+4])
		}
	}
	return out
}

func assertNoFragment(t *testing.T, where, text, pw string) {
	t.Helper()
	for _, frag := range passwordFragments(pw) {
		if strings.Contains(text, frag) {
			t.Errorf("%s shows %q of the password %q: %s", where, frag, pw, text)
			return
		}
	}
}

// TestDSNPasswordNoFragmentShows: whatever the DSN's shape and whatever
// characters its password holds, no part of the password (no fragment of
// 4 characters) shows in Open's error, or in the command's output and
// errors (stats, migrate status).
func TestDSNPasswordNoFragmentShows(t *testing.T) {
	parallelTest(t)
	cliBin(t)
	commands := [][]string{{"stats"}, {"migrate", "status"}}
	k := 0
	for _, shape := range dsnShapes {
		for _, pw := range dsnPasswords {
			dsn := fmt.Sprintf(shape, pw)
			c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := store.Open(c, dsn, store.WithoutMigrate())
			cancel()
			require.Error(t, err, dsn)
			assert.Contains(t, err.Error(), "alkstore: open: ", dsn)
			assertNoFragment(t, "store.Open's error", err.Error(), pw)
			// The commands scrub their output with one function: each
			// combination runs one of them, in turn (both for every one
			// took 126 processes, 25 s of the suite under load).
			args := commands[k%len(commands)]
			k++
			r := runCLI(t, "", append([]string{"--dsn", dsn}, args...)...)
			assert.NotEqual(t, 0, r.code, "alkstore %v on %q: %s", args, dsn, r.out)
			assertNoFragment(t, fmt.Sprintf("alkstore %s", strings.Join(args, " ")), r.out+r.err, pw)
		}
	}
}

// TestDSNRedactionKeepsTheRest: scrubbing hides the password's pieces,
// not the rest of the DSN an operator needs to read the error: the port
// stays when the only '@' after the userinfo is a query password's.
func TestDSNRedactionKeepsTheRest(t *testing.T) {
	parallelTest(t)
	for _, dsn := range []string{
		"postgres://bob@127.0.0.1:5439/db?connect_timeout=1&password=Qx7v@Wm3k",
		"postgres://bob:Qx7v@127.0.0.1:5439/db?connect_timeout=1",
		"host=127.0.0.1 port=5439 user=bob password=Qx7v@Wm3k dbname=db connect_timeout=1",
	} {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := store.Open(c, dsn, store.WithoutMigrate())
		cancel()
		require.Error(t, err, dsn)
		assert.Contains(t, err.Error(), "127.0.0.1:5439", dsn)
		assert.Contains(t, err.Error(), "user=bob", dsn)
		assert.NotContains(t, err.Error(), "Qx7v", dsn)
	}
}

// A PostgreSQL DSN with its scheme mistyped or left out, or a key of the
// wrong case, is read as an SQLite file name, and SQLite's errors quote the
// name whole: its password showed in store.Open's error and the CLI's
// output (review52d). What would be its password is scrubbed now.
func TestDSNPasswordOfAMistypedPostgresDSNDoesNotShow(t *testing.T) {
	parallelTest(t) // as a serial test it held every test after it until the command's build ended (74 s in make test at load 12-19)
	const pw = "Qx7vWm3k"
	for _, c := range []struct{ dsn, pw string }{
		{"postgres:app:" + pw + "@localhost/app", pw},
		{"app:" + pw + "@localhost:5432/app", pw},
		{"Host=localhost password=" + pw + " dbname=x/y", pw},
		{"Host=localhost Password='" + pw + "' dbname=x/y", pw},
		// A password holding ':' (only the text after its last ':' was
		// scrubbed, review53a), and one holding '"' and a tab (migrate
		// status quoted the name with %q, whose escapes hid it).
		{"postgres:bob:LongSecret:pw@127.0.0.1/app", "LongSecret"},
		{"bob:Long\"Secret\tPw99@127.0.0.1/app", "Long\"Secret\tPw99"},
	} {
		t.Run(c.dsn, func(t *testing.T) {
			r := runCLI(t, t.TempDir(), "--dsn", c.dsn, "migrate", "status")
			assert.NotEqual(t, 0, r.code)
			assert.NotContains(t, r.err+r.out, c.pw)
			assert.NotContains(t, r.err+r.out, "Secret")
			s, err := store.Open(ctx(t), c.dsn)
			if s != nil {
				s.Close()
			}
			require.Error(t, err)
			assert.NotContains(t, err.Error(), c.pw)
		})
	}
}
