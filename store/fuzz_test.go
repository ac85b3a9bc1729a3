package store

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	dsnform "github.com/alkstore/alkstore/internal/dsn"
)

// The DSN's password as the driver takes it, and a key=value DSN's
// password settings (internal/dsn, which Open scrubs its errors with).
var (
	dsnPassword       = dsnform.Password
	keyValuePasswords = dsnform.KeyValuePasswords
)

// The seeds run under plain `go test` (so `make test` covers them); `go test
// -fuzz FuzzX ./store` explores further.

// A mechanism name is accepted exactly when the contract allows it: 1–255
// bytes of valid UTF-8, no NUL or control characters, outside the reserved
// prefix; a refusal matches ErrInvalidName or ErrReservedName.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"orders", "", "a", "__alk", "__alkx", "__al", "é", "a\x00b", "a\nb", "\xff",
		"\u0085", "\u200b", strings.Repeat("x", 255), strings.Repeat("x", 256), strings.Repeat("é", 128)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := validateName(name)
		shapeOK := len(name) >= 1 && len(name) <= maxNameLen && utf8.ValidString(name) &&
			!strings.ContainsFunc(name, unicode.IsControl)
		switch {
		case shapeOK && !strings.HasPrefix(name, ReservedPrefix):
			if err != nil {
				t.Fatalf("validateName(%q): %v, want nil", name, err)
			}
		case shapeOK:
			if !errors.Is(err, ErrReservedName) {
				t.Fatalf("validateName(%q): %v, want ErrReservedName", name, err)
			}
		default:
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("validateName(%q): %v, want ErrInvalidName", name, err)
			}
		}
	})
}

// parseSpec never panics and refuses only with ErrInvalidArgument; an
// accepted spec fires strictly later each time, also when the scheduler
// wakes late.
func FuzzCronSpec(f *testing.F) {
	for _, s := range []struct {
		spec, tz string
	}{
		{"* * * * *", ""}, {"*/5 * * * * *", "UTC"}, {"0 30 2 * * *", "Europe/Paris"}, {"0 2 * * *", "America/New_York"},
		{"@hourly", ""}, {"@daily", "Australia/Lord_Howe"}, {"@every 90s", ""}, {"@every 0s", ""}, {"@every 1.5s", ""},
		{"@every -1s", ""}, {"0 0 30 2 *", ""}, {"0 0 29 2 *", ""}, {"0 0 29 2 1", ""}, {"TZ=UTC * * * * *", ""},
		{"* * * * *", "Local"}, {"* * * * *", "../etc/passwd"}, {"60 * * * *", ""}, {"1-0 * * * *", ""},
		{"*/0 * * * *", ""}, {"0 0 1 1 * 2030", ""}, {"@every 2562047h", ""}, {"", ""}, {"@", ""},
	} {
		f.Add(s.spec, s.tz, int64(1_800_000_000), uint32(1))
	}
	f.Fuzz(func(t *testing.T, spec, tz string, start int64, late uint32) {
		c, err := parseSpec(spec, tz)
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("parseSpec(%q, %q): %v, want ErrInvalidArgument", spec, tz, err)
			}
			return
		}
		// A start between 1970 and 2200, and a wake up to ~4 days late.
		now := time.Unix(int64(uint64(start)%(230*365*86400)), int64(uint64(start)%1e9)).UTC()
		lateBy := time.Duration(late%(4*86400_000)) * time.Millisecond
		b := c.first(now)
		for i := 0; i < 20 && !b.IsZero(); i++ {
			if !b.After(now) {
				t.Fatalf("spec %q in %q: boundary %s is not after %s", spec, tz, b, now)
			}
			now = b
			if i%2 == 1 {
				now = b.Add(lateBy)
			}
			b = c.after(b, now)
		}
	})
}

// Open refuses DSNs it does not take (other schemes, key=value DSNs that
// do not parse) before it touches anything, with ErrInvalidArgument, and
// never shows their password.
func FuzzOpenRefusesOtherDSNs(f *testing.F) {
	for _, s := range []string{"mysql://u:s3cr3tpw@h/db", "host=h password = s3cr3tpw junk", "a:s3cr3tpw@x://h", "://u:s3cr3tpw@h",
		" user = u x", "HTTP://u:s3cr3tpw@h", "postgres:/u:s3cr3tpw@h", "00:000000@://",
		`password='s3cr3t\'pw x' port=p`, "password=s3cr3tpw host='unterminated", "password =s3cr3tpw port=-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		switch {
		case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"),
			strings.HasPrefix(dsn, "sqlite:"), strings.HasPrefix(dsn, "file:"):
			return // opened for real: FuzzPostgresDSNPasswordNeverShows covers postgres URLs
		case func() bool { k, _ := dsnform.Classify(dsn); return k == dsnform.PostgresKeyValue }():
			if _, err := pgxpool.ParseConfig(dsn); err == nil {
				return // a key=value DSN that parses: Open would connect
			}
		case dsn != "" && !strings.Contains(dsn, "://"):
			return // a SQLite file path
		}
		_, err := Open(context.Background(), dsn)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("Open(%q): %v, want ErrInvalidArgument", dsn, err)
		}
		for _, pw := range passwordsIn(dsn) {
			if shows(err, pw, dsn) {
				t.Fatalf("Open(%q): error %q shows the password %q", dsn, err, pw)
			}
		}
	})
}

// A postgres URL's password never shows in Open's error, however malformed
// the URL around it (parse errors quote the DSN). URLs that parse would
// connect, so for those the test checks that dsnPassword finds the password
// the driver will use, the one every later error is scrubbed of.
func FuzzPostgresDSNPasswordNeverShows(f *testing.F) {
	for _, s := range [][3]string{
		{"user", "s3cr3tpw", "localhost:5432/db"},
		{"user", "s3cr3tpw", "localhost:port/db"},
		{"user", "s3:cr3tpw", "h/db"},
		{"user", "s3@cr3tpw", "h:99999/db"},
		{"user", "s3%40cr3tpw", "h/db?connect_timeout=x"},
		{"user", "s3%zzcr3tpw", "h/db"},
		{"us:er", "s3cr3tpw", "h/db"},
		{"user", "s3cr3tpw", "h/db?sslmode=bogus"},
		{"user", "s3cr3tpw", "h/db?pool_max_conns=-1"},
		{"user", "s3cr3tpw", "[::1/db"},
		{"user", "s3cr3tpw", "h/db%"},
		{"", "s3cr3tpw", "h/db"},
		{"user", "s3 cr3tpw", "h/db"},
		{"user", "s3cr3tpw", "h,h2:x/db"},
		{"my user", "pa:ssword", "h/db"},
		{" ", ":", "0"}, // net/url refuses this userinfo; the driver takes it
	} {
		f.Add(false, s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, long bool, user, password, rest string) {
		scheme := "postgres://"
		if long {
			scheme = "postgresql://"
		}
		dsn := scheme + user + ":" + password + "@" + rest
		cfg, perr := pgxpool.ParseConfig(dsn)
		if perr == nil {
			// Open would connect. The driver's password is what dsnPassword
			// must find, to scrub it from connection and migration errors.
			got := dsnPassword(dsn)
			if want := cfg.ConnConfig.Password; want != got {
				t.Fatalf("dsnPassword(%q) = %q, the driver uses %q", dsn, got, want)
			}
			return
		}
		_, err := Open(context.Background(), dsn) // fails parsing, as above, before any I/O
		if err == nil {
			t.Fatalf("Open(%q) succeeded; ParseConfig failed with %v", dsn, perr)
		}
		for _, pw := range append(passwordsIn(dsn), password) {
			if shows(err, pw, dsn) {
				t.Fatalf("Open(%q): error %q shows the password %q", dsn, err, pw)
			}
		}
	})
}

// passwordsIn lists what a reader of dsn could take for its password: the
// text between the userinfo's ':' and '@', raw and percent-decoded.
func passwordsIn(dsn string) []string {
	out := keyValuePasswords(dsn)
	if p := dsnPassword(dsn); p != "" {
		out = append(out, p)
	}
	_, after, ok := strings.Cut(dsn, "://")
	if !ok {
		after = dsn
	}
	if at := strings.LastIndex(after, "@"); at >= 0 {
		if _, pw, ok := strings.Cut(after[:at], ":"); ok {
			out = append(out, pw)
			if d, err := url.PathUnescape(pw); err == nil {
				out = append(out, d)
			}
		}
	}
	return out
}

// shows reports whether err's text contains pw where only the password
// could have put it: pw must be long enough not to occur by chance, must
// occur in dsn only once (not also in the host, say), and must not be the
// masks that redaction writes.
func shows(err error, pw, dsn string) bool {
	if err == nil || len(pw) < 6 || strings.Count(dsn, pw) > 1 || strings.Contains(":xxxxxx@ password=xxxxx", pw) {
		return false
	}
	return strings.Contains(err.Error(), pw)
}
