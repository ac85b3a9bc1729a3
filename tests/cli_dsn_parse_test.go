package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestCLIDSNThatDoesNotParseIsBadInput: a PostgreSQL DSN that does not
// parse (a bad port, an unknown sslmode, a timeout that is no number) is
// bad input in either form: store.Open's error matches ErrInvalidArgument
// and every command exits 2. The postgres:// URL exited 1 (a failure, as
// if the server had refused) where the same fault in key=value exited 2.
func TestCLIDSNThatDoesNotParseIsBadInput(t *testing.T) {
	parallelTest(t)
	cliBin(t)
	for _, fault := range []struct{ url, kv string }{
		{"postgres://bob:Qx7vWm3k@127.0.0.1:99999/db", "host=127.0.0.1 port=99999 user=bob password=Qx7vWm3k dbname=db"},
		{"postgres://bob:Qx7vWm3k@127.0.0.1:1/db?sslmode=bogus", "host=127.0.0.1 port=1 user=bob password=Qx7vWm3k dbname=db sslmode=bogus"},
		{"postgresql://bob:Qx7vWm3k@127.0.0.1:1/db?connect_timeout=x", "host=127.0.0.1 port=1 user=bob password=Qx7vWm3k dbname=db connect_timeout=x"},
	} {
		for _, dsn := range []string{fault.url, fault.kv} {
			c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := store.Open(c, dsn, store.WithoutMigrate())
			cancel()
			require.Error(t, err, dsn)
			assert.ErrorIs(t, err, store.ErrInvalidArgument, dsn)
			assert.NotContains(t, err.Error(), "Qx7vWm3k", dsn)
			for _, args := range [][]string{{"stats"}, {"migrate", "status"}} {
				r := runCLI(t, "", append([]string{"--dsn", dsn}, args...)...)
				assert.Equal(t, 2, r.code, "alkstore %v on %q: %s", args, dsn, r.err)
				assert.NotContains(t, r.out+r.err, "Qx7vWm3k", dsn)
			}
		}
	}
}
