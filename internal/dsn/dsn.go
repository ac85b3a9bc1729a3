// Package dsn reads a DSN as store.Open does: which engine it names, and
// (secrets.go) what in it is secret. The library and the alkstore command
// share it, so the command never takes a DSN for another engine than the
// library would.
package dsn

import (
	"regexp"
	"strings"
)

// Kind is the form of a DSN.
type Kind int

const (
	Empty            Kind = iota // no DSN
	Unsupported                  // a URL of a scheme Open does not take
	PostgresURL                  // postgres:// or postgresql://
	PostgresKeyValue             // libpq's key=value form ("host=/tmp dbname=app")
	SQLite                       // a file path, sqlite:path or a file: URI
)

// Postgres reports whether the DSN names a PostgreSQL database.
func (k Kind) Postgres() bool { return k == PostgresURL || k == PostgresKeyValue }

// keyValue matches the first setting of libpq's "host=... dbname=..."
// form, which Open reads as pgx does (without it, it would be read as a
// SQLite file name); its key must be one of keywords.
var keyValue = regexp.MustCompile(`^\s*([a-z_]+)\s*=`)

// keywords are the keys a key=value DSN may start with: libpq's connection
// keywords, pgx's own (its pool's, its caches') and the run-time parameters
// a DSN commonly sets. Any "word=" at the start made a DSN key=value, so the
// SQLite file "data=1.db" was read as a PostgreSQL DSN (and opened the
// default socket's database); "sqlite:data=1.db" is still the way to name
// a file that starts with one of these.
var keywords = map[string]bool{}

func init() {
	for _, k := range strings.Fields(`host hostaddr port dbname database user password passfile
		require_auth channel_binding connect_timeout client_encoding options application_name
		fallback_application_name keepalives keepalives_idle keepalives_interval keepalives_count
		tcp_user_timeout replication gssencmode sslmode requiressl sslnegotiation sslcompression
		sslcert sslkey sslpassword sslcertmode sslrootcert sslcrl sslcrldir sslsni sslkeylogfile
		requirepeer ssl_min_protocol_version ssl_max_protocol_version min_protocol_version
		max_protocol_version krbsrvname krbspn gsslib gssdelegation service servicefile
		target_session_attrs load_balance_hosts
		pool_max_conns pool_min_conns pool_min_idle_conns pool_max_conn_lifetime
		pool_max_conn_lifetime_jitter pool_max_conn_idle_time pool_health_check_period pool_ping_timeout
		statement_cache_capacity description_cache_capacity default_query_exec_mode
		search_path timezone datestyle statement_timeout lock_timeout idle_in_transaction_session_timeout`) {
		keywords[k] = true
	}
}

// laterSetting matches a second "word=" setting after white space: a DSN
// of several settings is key=value whatever its first key (any run-time
// parameter, "work_mem=64MB host=db ..."), where a file name like
// "data=1.db" has one.
var laterSetting = regexp.MustCompile(`\s[a-z_]+\s*=`)

// isKeyValue reports whether d starts with a setting of a known keyword, or
// with a setting followed by more.
func isKeyValue(d string) bool {
	m := keyValue.FindStringSubmatchIndex(d)
	if m == nil {
		return false
	}
	return keywords[d[m[2]:m[3]]] || laterSetting.MatchString(d[m[1]:])
}

// uriScheme matches a URI scheme (RFC 3986), the only part of an
// unsupported DSN that an error may quote.
var uriScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// Classify is the form of d (key=value when its first setting's key is a
// known keyword or more settings follow: "data=1.db" is a file name) and, for SQLite, the path or file: URI to
// open (sqlite: stripped); for Unsupported, the scheme when it is one
// ("" when the text before "://" may hold a password: "u:pw@h://").
func Classify(d string) (Kind, string) {
	switch {
	case strings.HasPrefix(d, "postgres://"), strings.HasPrefix(d, "postgresql://"):
		return PostgresURL, ""
	case strings.HasPrefix(d, "sqlite:"):
		return SQLite, strings.TrimPrefix(d, "sqlite:")
	case strings.HasPrefix(d, "file:"):
		return SQLite, d
	case d == "":
		return Empty, ""
	case isKeyValue(d):
		return PostgresKeyValue, ""
	case strings.Contains(d, "://"):
		scheme, _, _ := strings.Cut(d, "://")
		if !uriScheme.MatchString(scheme) {
			scheme = ""
		}
		return Unsupported, scheme
	default:
		return SQLite, d
	}
}
