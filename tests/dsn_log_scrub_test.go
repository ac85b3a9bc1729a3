package tests

import (
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestDSNPasswordNotInTheLibrarysLogLines: the library's own log lines are
// scrubbed of the DSN's secrets as its errors are. The listen connection's
// loss was logged with the driver's error as it came, so a password the
// error quotes showed (review52). Here the error quotes it by having the
// same text: the password is "administrator" (the test cluster trusts any)
// and the server ends the LISTEN connection "due to administrator command".
// PostgreSQL only: SQLite has no listen connection.
func TestDSNPasswordNotInTheLibrarysLogLines(t *testing.T) {
	parallelTest(t)
	e := newEnv(t, "pg")
	c := ctx(t)
	const pw = "administrator"
	u, err := url.Parse(e.dsn)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), pw)
	q := u.Query()
	q.Set("application_name", "log-scrub-test")
	u.RawQuery = q.Encode()
	logs := newWarnings()
	s, err := store.Open(c, u.String(), store.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	defer s.Close()
	l, err := s.Listen(c, "scrub") // returns once the forwarder's LISTEN is in place
	require.NoError(t, err)
	defer l.Close()

	admin, err := pgx.Connect(c, e.dsn)
	require.NoError(t, err)
	defer admin.Close(c)
	var killed int
	require.NoError(t, admin.QueryRow(c, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'log-scrub-test' AND query LIKE '%LISTEN alkstore%'`).Scan(&killed))
	require.Equal(t, 1, killed)
	var lost string
	require.Eventually(t, func() bool {
		for _, m := range logs.all() {
			if strings.Contains(m, "listen connection lost") {
				lost = m
				return true
			}
		}
		return false
	}, 30*time.Second, time.Millisecond, "the forwarder logs its lost connection")
	assert.Contains(t, lost, "terminating connection due to xxxxx command", "the driver's error, scrubbed")
	for _, m := range logs.all() {
		assert.NotContains(t, m, pw)
	}
}
