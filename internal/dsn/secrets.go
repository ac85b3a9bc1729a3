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
// password whole is scrubbed whatever its length, in context when it is
// short (minWhole).
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
//
// A password the driver or net/url takes whole that is shorter than
// minWhole bytes is scrubbed only where it reads as the DSN's value (Set):
// scrubbed wherever it occurs, the password "a" garbled every "a" of an
// error ("fxxxxxiled to connect") and "dial" every "dial tcp".
func Secrets(d string) Set {
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
		for _, unescape := range []func(string) (string, error){url.PathUnescape, url.QueryUnescape} {
			if u, err := unescape(s); err == nil && u != s {
				whole = append(whole, u)
				exact[u] = exact[u] || exact[s] // the same password, decoded
			}
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
	var set Set
	for _, w := range whole {
		set.add(w, exact[w])
	}
	for _, w := range whole {
		fromUserinfo := slices.Contains(userinfos, w)
		for _, p := range pieceSep.Split(w, -1) {
			if len(p) < minPiece || p == w && set.isShort(p) {
				continue // a short password whole goes in context only
			}
			if fromUserinfo && paramKey.MatchString(p) && strings.Contains(d, p+"=") {
				continue // a query key the last '@' swept into the userinfo
			}
			set.anywhere = append(set.anywhere, p)
		}
	}
	return set.sorted()
}

// kvPasswordAnyCase is kvPassword whatever the key's case: libpq's keys
// are lower case, so "Password=" makes a DSN SQLite's file name, whose
// errors then quote it.
var kvPasswordAnyCase = regexp.MustCompile(`(?i)(?:^|\s)(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'?|\S*)`)

// fileNameSecrets is Secrets for a DSN read as an SQLite file name: the
// text between the last '@' and the last ':' before it (a userinfo's
// password), and password settings of any case; under minWhole bytes in
// context only, as Secrets (a short one was not scrubbed at all while it
// would have been scrubbed wherever it occurs).
func fileNameSecrets(d string) Set {
	var set Set
	if at := strings.LastIndex(d, "@"); at > 0 {
		head := d[:at]
		// The password may hold ':' itself: every reading from each ':'
		// on ("postgres:bob:Long:pw@h": "bob:Long:pw", "Long:pw", "pw").
		for i := strings.Index(head, ":"); i >= 0; {
			set.add(head[i+1:], true)
			j := strings.Index(head[i+1:], ":")
			if j < 0 {
				break
			}
			i += 1 + j
		}
	}
	for _, m := range kvPasswordAnyCase.FindAllStringSubmatch(d, -1) {
		set.add(m[1], true)
		set.add(strings.Trim(m[1], "'"), true)
	}
	return set.sorted()
}

// minWhole is the length from which a password is scrubbed wherever it
// occurs. A shorter one is scrubbed only where it reads as a DSN's value
// (Set): masked wherever it occurred, the password "a" made "failed" read
// "fxxxxxiled" and "dial" masked "dial tcp"; and no error quotes a password
// out of the DSN around it (the server never echoes it, parse errors quote
// the DSN, dial errors its host). A piece of a password, or a reading of
// one that the driver does not take, is scrubbed wherever it occurs from
// minPiece bytes on, as before: it is a fragment of a longer password,
// which errors quote cut at any of its characters.
const minWhole = 8

// ctxPrev and ctxNext are the characters that make a short password's
// occurrence a DSN's value: "user:pw@", "password=pw&", "password='pw'".
// Not a space: "password=dial host=h" would mask "dial tcp".
const (
	ctxPrev = ":='"
	ctxNext = "@&'"
)

// Set is what to scrub from errors and output: secrets scrubbed wherever
// they occur, and short passwords (under minWhole bytes) scrubbed only where
// they read as the DSN's value: neither neighbour a letter or a digit (a
// whole word) and one of them a character that stands beside a password in
// a DSN (':' or '=' before it, '@' or '&' after it, a quote). The zero Set
// scrubs nothing.
type Set struct {
	anywhere []string // longest first: a secret holding another goes whole
	short    []string // longest first
}

// isShort reports whether p is one of the set's short passwords.
func (s *Set) isShort(p string) bool { return slices.Contains(s.short, p) }

// add takes a secret: exact says it is a password whole (the driver's,
// net/url's), which when short is scrubbed only in context.
func (s *Set) add(p string, exact bool) {
	switch {
	case p == "":
	case !exact || len(p) >= minWhole:
		s.anywhere = append(s.anywhere, p)
	default:
		s.short = append(s.short, p)
	}
}

// With is s with the passwords connections use (the driver's, when they
// come from a configuration rather than this DSN), each taken whole.
func (s Set) With(passwords ...string) Set {
	out := Set{anywhere: slices.Clone(s.anywhere), short: slices.Clone(s.short)}
	for _, p := range passwords {
		if !slices.Contains(out.anywhere, p) && !out.isShort(p) {
			out.add(p, true)
		}
	}
	return out.sorted()
}

// Empty reports whether s scrubs nothing.
func (s Set) Empty() bool { return len(s.anywhere) == 0 && len(s.short) == 0 }

func (s Set) sorted() Set {
	for _, l := range []*[]string{&s.anywhere, &s.short} {
		slices.SortStableFunc(*l, func(a, b string) int { return len(b) - len(a) })
		*l = slices.Compact(*l)
	}
	return s
}

func isWord(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// Scrub replaces every secret of s in text with Mask, longest first, the
// short passwords only in context.
func Scrub(text string, s Set) string {
	for _, a := range s.anywhere {
		text = strings.ReplaceAll(text, a, Mask)
	}
	for _, p := range s.short {
		text = scrubInContext(text, p)
	}
	return text
}

// scrubInContext masks the occurrences of p in text that read as a DSN's
// value (Set).
func scrubInContext(text, p string) string {
	var b strings.Builder
	i := 0
	for {
		j := strings.Index(text[i:], p)
		if j < 0 {
			break
		}
		at, end := i+j, i+j+len(p)
		var before, after byte // 0: the text's edge
		if at > 0 {
			before = text[at-1]
		}
		if end < len(text) {
			after = text[end]
		}
		whole := (before == 0 || !isWord(before)) && (after == 0 || !isWord(after))
		// "password = pw": libpq allows spaces around '=', so the '='
		// may stand a few spaces before.
		k := at
		for k > 0 && text[k-1] == ' ' {
			k--
		}
		if k > 0 && k < at && text[k-1] == '=' {
			before = '='
		}
		inContext := before != 0 && strings.IndexByte(ctxPrev, before) >= 0 || after != 0 && strings.IndexByte(ctxNext, after) >= 0
		if whole && inContext {
			b.WriteString(text[i:at])
			b.WriteString(Mask)
			i = end
		} else {
			b.WriteString(text[i : at+1])
			i = at + 1
		}
	}
	if i == 0 {
		return text
	}
	b.WriteString(text[i:])
	return b.String()
}

// redactedError is an error whose text has its secrets scrubbed, the
// original reachable for errors.Is and errors.As.
type redactedError struct {
	err     error
	secrets Set
}

func (e *redactedError) Error() string { return Scrub(e.err.Error(), e.secrets) }
func (e *redactedError) Unwrap() error { return e.err }

// Redact is err with the secrets of s scrubbed from its text; err itself
// when its text holds none.
func Redact(err error, s Set) error {
	if err == nil || s.Empty() {
		return err
	}
	if text := err.Error(); Scrub(text, s) == text {
		return err
	}
	return &redactedError{err: err, secrets: s}
}
