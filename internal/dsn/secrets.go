package dsn

import (
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Mask is what a scrubbed secret reads as.
const Mask = "xxxxx"

// minPiece is the shortest piece of a password scrubbed on its own
// (Secrets): shorter ones would match ordinary text in most errors. A
// password whole is scrubbed whatever its length.
const minPiece = 4

// Password is the password of a PostgreSQL DSN: exactly the one the driver
// will send when the DSN parses; else the best guess of a reader (net/url's,
// or the text between the userinfo's ':' and its last '@').
func Password(d string) string {
	if cfg, err := pgconn.ParseConfig(d); err == nil {
		// Exactly the password the driver will send; net/url refuses some
		// userinfo the driver takes ("postgres:// ::@h" has password ":").
		return cfg.Password
	}
	u, err := url.Parse(d)
	if err != nil || u.User == nil {
		// An unparsable URL may still carry a password between ':' and '@'.
		if at := strings.LastIndex(d, "@"); at > 0 {
			head := d[:at]
			if i := strings.LastIndex(head, ":"); i > strings.Index(head, "://")+2 {
				return head[i+1:]
			}
		}
		return ""
	}
	pw, _ := u.User.Password()
	return pw
}

// kvPassword finds libpq key=value password settings, quoted or not,
// spaces around '=' allowed.
var kvPassword = regexp.MustCompile(`(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'?|\S*)`)

// kvSSLPassword is kvPassword for the TLS key's password.
var kvSSLPassword = regexp.MustCompile(`(?:^|\s)sslpassword\s*=\s*('(?:[^'\\]|\\.)*'?|\S*)`)

// kvPasswordToNextKey is a password setting up to the next "key=" (or the
// end): an unquoted value with a space, or a quote closed too early,
// leaves the rest of the password where the driver expects a key, and its
// error quotes it.
var kvPasswordToNextKey = regexp.MustCompile(`(?:^|\s)password\s*=\s*(.*?)(?:\s+[a-z_]+\s*=|$)`)

// KeyValuePasswords is every password a key=value DSN may carry, raw and
// unquoted, for scrubbing errors about a DSN that does not parse.
func KeyValuePasswords(d string) []string {
	var out []string
	for _, m := range kvPassword.FindAllStringSubmatch(d, -1) {
		v := m[1]
		out = append(out, v)
		if inner, ok := strings.CutPrefix(v, "'"); ok {
			inner = strings.TrimSuffix(inner, "'")
			out = append(out, inner, strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(inner))
		}
	}
	return out
}

// queryPasswordToNextKey is a URL's password parameter up to the next
// "&key=" (or the end), kvPasswordToNextKey's counterpart.
var queryPasswordToNextKey = regexp.MustCompile(`(?:^|&)[^&=]*password[^&=]*=(.*?)(?:&[a-z_]+=|$)`)

// pieceSep splits a password into the pieces a parser that read it
// differently (at its '@', ':', '/', '?', '#', '&', '=', a space or a
// quote) may quote on their own, and percent-escapes from their text.
var pieceSep = regexp.MustCompile(`[@:/?#&=;,'"\\%\s]+`)

// paramKey is a piece that reads as a connection parameter's name
// (connect_timeout, password): followed by '=' in the DSN it is a key of
// the query, not a piece of the password, and scrubbing it would garble
// errors that name it.
var paramKey = regexp.MustCompile(`^[a-z_]+$`)

// Secrets is every text of d that may be its password or a piece of it,
// for scrubbing errors and output: the password each reading of the DSN
// finds (the driver's, net/url's, the userinfo up to its first '@' and up
// to its last, query and key=value password settings, each raw and
// percent-decoded), and every piece of those at least 4 bytes long. A
// password holding a character the DSN's syntax gives a meaning ('@', '/',
// '?', '#', a space) is read differently by different parsers, and each
// error quotes the pieces its parser made (pgx took "pa@s3cret" as the
// password "pa" and the host "s3cret@127.0.0.1"); scrubbing only the one
// password the driver took left the others in the text. For a DSN read as
// an SQLite file name, Secrets is what would be a password were it a
// PostgreSQL DSN with its scheme mistyped or left out ("postgres:u:pw@h/db",
// "u:pw@h/db", "Host=h Password=pw"): SQLite's errors quote the name whole.
func Secrets(d string) []string {
	kind, _ := Classify(d)
	if !kind.Postgres() {
		return fileNameSecrets(d)
	}
	var whole []string
	// add takes a password some reading finds. The driver's and net/url's
	// go whole whatever their length (below, via exact); another reading's
	// only from minPiece bytes on: the first '@' of "pa@s3cret" makes "pa",
	// which would garble every "parse" in the text.
	exact := map[string]bool{}
	add := func(s string) {
		if s == "" || len(s) < minPiece && !exact[s] {
			return
		}
		whole = append(whole, s)
		if u, err := url.PathUnescape(s); err == nil && u != s {
			whole = append(whole, u)
		}
		if u, err := url.QueryUnescape(s); err == nil && u != s {
			whole = append(whole, u)
		}
	}
	exact[Password(d)] = true
	add(Password(d))
	var userinfos []string // the userinfo's password part by each reading
	if kind == PostgresURL {
		_, rest, _ := strings.Cut(d, "://")
		if u, err := url.Parse(d); err == nil && u.User != nil {
			pw, _ := u.User.Password()
			exact[pw] = true
			add(pw)
		}
		first, last := strings.Index(rest, "@"), strings.LastIndex(rest, "@")
		for _, at := range []int{first, last} {
			if at < 0 || at == last && at != first && strings.Contains(rest[first:last], "password") {
				continue // the last '@' is a query password's (read below), not the userinfo's end
			}
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				add(pw)
				userinfos = append(userinfos, pw)
			}
		}
		if _, query, ok := strings.Cut(rest, "?"); ok {
			for _, kv := range strings.Split(query, "&") {
				k, v, _ := strings.Cut(kv, "=")
				if uk, err := url.QueryUnescape(k); strings.Contains(k, "password") || err == nil && strings.Contains(uk, "password") {
					add(v) // password, sslpassword, however spelled
				}
			}
			for _, m := range queryPasswordToNextKey.FindAllStringSubmatch(query, -1) {
				add(m[1]) // a raw '&' in it made the rest a parameter of its own
			}
		}
	} else {
		for _, pw := range KeyValuePasswords(d) {
			exact[pw] = true
			add(pw)
		}
		for _, m := range kvPasswordToNextKey.FindAllStringSubmatch(d, -1) {
			add(m[1])
		}
		for _, m := range kvSSLPassword.FindAllStringSubmatch(d, -1) {
			add(m[1])
		}
	}
	out := slices.Clone(whole)
	for _, w := range whole {
		fromUserinfo := slices.Contains(userinfos, w)
		for _, p := range pieceSep.Split(w, -1) {
			if len(p) < minPiece {
				continue
			}
			if fromUserinfo && paramKey.MatchString(p) && strings.Contains(d, p+"=") {
				continue // a query key the last '@' swept into the userinfo
			}
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) }) // a secret holding another goes whole
	return slices.Compact(out)
}

// kvPasswordAnyCase is kvPassword whatever the key's case: libpq's keys
// are lower case, so "Password=" makes a DSN SQLite's file name, whose
// errors then quote it.
var kvPasswordAnyCase = regexp.MustCompile(`(?i)(?:^|\s)(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'?|\S*)`)

// fileNameSecrets is Secrets for a DSN read as an SQLite file name: the
// text between the last '@' and the last ':' before it (a userinfo's
// password), and password settings of any case, from minPiece bytes on.
func fileNameSecrets(d string) []string {
	var out []string
	if at := strings.LastIndex(d, "@"); at > 0 {
		head := d[:at]
		if i := strings.LastIndex(head, ":"); i >= 0 && len(head)-i-1 >= minPiece {
			out = append(out, head[i+1:])
		}
	}
	for _, m := range kvPasswordAnyCase.FindAllStringSubmatch(d, -1) {
		if v := strings.Trim(m[1], "'"); len(v) >= minPiece {
			out = append(out, m[1], v)
		}
	}
	return Sorted(slices.Compact(out))
}

// Scrub replaces every secret in text with Mask, longest first.
func Scrub(text string, secrets []string) string {
	for _, s := range secrets {
		if s != "" {
			text = strings.ReplaceAll(text, s, Mask)
		}
	}
	return text
}

// redactedError is an error whose text has its secrets scrubbed, the
// original reachable for errors.Is and errors.As.
type redactedError struct {
	err     error
	secrets []string
}

func (e *redactedError) Error() string { return Scrub(e.err.Error(), e.secrets) }
func (e *redactedError) Unwrap() error { return e.err }

// Redact is err with secrets (longest first, as Secrets returns them)
// scrubbed from its text; err itself when its text holds none.
func Redact(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	for _, s := range secrets {
		if s != "" && strings.Contains(text, s) {
			return &redactedError{err: err, secrets: secrets}
		}
	}
	return err
}

// Sorted is secrets longest first, for Redact and Scrub.
func Sorted(secrets []string) []string {
	secrets = slices.Clone(secrets)
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	return secrets
}
