package store

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// refuseTxControl refuses business SQL that would end or begin a
// transaction through a Tx: BEGIN, START TRANSACTION, COMMIT, END,
// ROLLBACK (but ROLLBACK TO a savepoint), ABORT and PREPARE TRANSACTION,
// their AND CHAIN forms included. Run through the driver transaction, a
// COMMIT or ROLLBACK ends it behind the Tx's back: on PostgreSQL every
// later statement then commits on its own and tx.Commit reports success
// for writes a ROLLBACK threw away; on SQLite a COMMIT stores the
// transaction and tx.Commit then reports it lost; followed by a BEGIN (or
// chained) in the same text, a new transaction takes the old one's place
// and nothing afterwards can tell. End a Tx with its Commit or Rollback;
// savepoints (SAVEPOINT, RELEASE, ROLLBACK TO) are fine.
//
// Every statement of a text of several is looked at: sql is split at the
// semicolons outside string literals ('...' with a doubled ' for a quote, on pg E'...'
// with backslash escapes and $tag$ dollar quotes), quoted identifiers
// ("...", on SQLite also [...] and `...`), comments (-- and /* */, nested
// on pg) and the BEGIN ... END body of a CREATE TRIGGER (SQLite) or of a
// BEGIN ATOMIC function (pg), in which CASE ... END nests. What this
// misses (a name spelled like one of those keywords inside such a body
// might mislead it) runs, and Tx.Exec's check that the connection is still
// in a transaction catches an end not followed by a new beginning.
//
// SQLite does not nest comments, but a text is also read as if it did, so
// either reading finding a transaction-control statement refuses it (what
// only one reading finds is a syntax error in SQLite anyway).
//
// savepoints says whether sql has a statement that makes, releases or
// rolls back to a savepoint (or may have: a first word is enough), which
// the Tx then keeps account of (see txState.trackSavepoints).
func refuseTxControl(sql string, pg bool) (savepoints bool, err error) {
	check := func(stmt string) bool {
		var sp bool
		sp, err = refuseStatement(stmt)
		savepoints = savepoints || sp
		return err == nil
	}
	eachStatement(sql, pg, true, check)
	if err == nil && !pg {
		eachStatement(sql, pg, false, check)
	}
	return savepoints, err
}

// refuseStatement looks at one statement's first words; savepoint says it
// is a SAVEPOINT, RELEASE or ROLLBACK TO.
func refuseStatement(sql string) (savepoint bool, err error) {
	w, rest := firstWord(sql)
	switch w {
	case "BEGIN", "COMMIT", "END", "ABORT":
	case "START", "PREPARE": // START TRANSACTION, PREPARE TRANSACTION 'id'
		if n, _ := firstWord(rest); n != "TRANSACTION" {
			return false, nil
		}
	case "ROLLBACK": // ROLLBACK [TRANSACTION | WORK] TO [SAVEPOINT] name keeps the transaction
		n, more := firstWord(rest)
		if n == "TRANSACTION" || n == "WORK" {
			n, _ = firstWord(more)
		}
		if n == "TO" {
			return true, nil
		}
	case "SAVEPOINT", "RELEASE":
		return true, nil
	default:
		return false, nil
	}
	return false, fmt.Errorf("%w: %s through a Tx would end or begin a transaction behind its back: end a Tx with its Commit or Rollback (savepoints are fine)", ErrInvalidArgument, w)
}

// savepointStep is what a savepoint statement does.
type savepointStep uint8

const (
	savepointMake       savepointStep = iota + 1 // SAVEPOINT name
	savepointRelease                             // RELEASE [SAVEPOINT] name
	savepointRollbackTo                          // ROLLBACK [TRANSACTION | WORK] TO [SAVEPOINT] name
)

// eachSavepoint calls fn, in order, with what each savepoint statement of
// sql does and the savepoint's name as the engine compares names: on
// PostgreSQL an unquoted name folded to lower case (ASCII, as PostgreSQL
// folds it) and cut to 63 bytes, a quoted one as written ("" for a ");
// on SQLite, which compares savepoint names without regard to ASCII case,
// every name folded, its quotes ("...", [...], `...`, '...') removed. A
// statement whose name cannot be read so (a PostgreSQL U&"..." name,
// anything after the name) gives name "" (matching no savepoint). sql is
// split into statements as SQLite (or PostgreSQL) does, comments not
// nested on SQLite.
func eachSavepoint(sql string, pg bool, fn func(step savepointStep, name string)) {
	eachStatement(sql, pg, pg, func(stmt string) bool {
		w, rest, ok := sqlToken(stmt, pg)
		if !ok || w.quoted {
			return true
		}
		var step savepointStep
		switch {
		case strings.EqualFold(w.text, "savepoint"):
			step = savepointMake
		case strings.EqualFold(w.text, "release"):
			step = savepointRelease
			rest = skipKeyword(rest, pg, "savepoint")
		case strings.EqualFold(w.text, "rollback"):
			step = savepointRollbackTo
			if r := skipKeyword(rest, pg, "transaction"); r != rest {
				rest = r
			} else {
				rest = skipKeyword(rest, pg, "work")
			}
			r := skipKeyword(rest, pg, "to")
			if r == rest {
				return true // not a ROLLBACK TO (refused before it ran)
			}
			rest = skipKeyword(r, pg, "savepoint")
		default:
			return true
		}
		name, rest, ok := sqlToken(rest, pg)
		if !ok || skipSpace(rest, pg) != "" {
			fn(step, "")
			return true
		}
		n := name.text
		if !pg || !name.quoted {
			n = asciiLower(n)
		}
		if pg && len(n) > 63 { // NAMEDATALEN-1, cut at a character's start
			i := 63
			for i > 0 && !utf8.RuneStart(n[i]) {
				i--
			}
			n = n[:i]
		}
		fn(step, n)
		return true
	})
}

// skipKeyword returns what follows keyword kw at the start of sql, or sql
// when it does not start with it.
func skipKeyword(sql string, pg bool, kw string) string {
	if w, rest, ok := sqlToken(sql, pg); ok && !w.quoted && strings.EqualFold(w.text, kw) {
		return rest
	}
	return sql
}

// sqlWord is an identifier or keyword read by sqlToken: a quoted one
// without its quotes.
type sqlWord struct {
	text   string
	quoted bool
}

// skipSpace returns sql after its leading white space and comments.
func skipSpace(sql string, pg bool) string {
	for {
		sql = strings.TrimLeft(sql, " \t\r\n\f\v")
		switch {
		case strings.HasPrefix(sql, "--"):
			i := strings.IndexByte(sql, '\n')
			if i < 0 {
				return ""
			}
			sql = sql[i+1:]
		case strings.HasPrefix(sql, "/*"):
			sql = skipComment(sql, pg)
		default:
			return sql
		}
	}
}

// sqlToken reads the identifier or keyword sql starts with (after white
// space and comments): a bare word, or a quoted identifier (on SQLite
// also [...], `...` and '...'). ok is false when sql starts with anything
// else or nothing.
func sqlToken(sql string, pg bool) (w sqlWord, rest string, ok bool) {
	sql = skipSpace(sql, pg)
	if sql == "" {
		return sqlWord{}, "", false
	}
	c := sql[0]
	switch {
	case c == '"' || !pg && (c == '`' || c == '\''):
		end := skipQuoted(sql, 1, c, false)
		if end < 2 || sql[end-1] != c {
			return sqlWord{}, sql, false // not closed
		}
		text := sql[1 : end-1]
		if strings.IndexByte(text, c) >= 0 {
			text = strings.ReplaceAll(text, string([]byte{c, c}), string(c))
		}
		return sqlWord{text: text, quoted: true}, sql[end:], true
	case !pg && c == '[':
		end := strings.IndexByte(sql, ']')
		if end < 0 {
			return sqlWord{}, sql, false
		}
		return sqlWord{text: sql[1:end], quoted: true}, sql[end+1:], true
	case wordStart(c):
		j := 1
		for j < len(sql) && wordPart(sql[j], pg) {
			j++
		}
		if pg && j < len(sql) && sql[j] == '&' { // U&"...": not read
			return sqlWord{}, sql, false
		}
		return sqlWord{text: sql[:j]}, sql[j:], true
	}
	return sqlWord{}, sql, false
}

// asciiLower folds s's ASCII letters to lower case, as both engines fold
// names (no copy when there is nothing to fold).
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// eachStatement calls fn with the text of each statement of sql, from its
// first word to the semicolon that ends it (or the end of sql), until fn
// returns false. Quoting and comments are as refuseTxControl says.
// Comments nest when nested is set.
func eachStatement(sql string, pg, nested bool, fn func(string) bool) {
	start := -1           // the current statement's first word; -1 before it
	first, prev := "", "" // its first word and the word before this one
	trigger := false      // a SQLite CREATE ... TRIGGER
	depth := 0            // BEGIN ... END bodies and CASE ... END within them
	for i := 0; i < len(sql); {
		c := sql[i]
		next := byte(0)
		if i+1 < len(sql) {
			next = sql[i+1]
		}
		switch {
		case c == '-' && next == '-':
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				i = len(sql)
			} else {
				i += j + 1
			}
			continue
		case c == '/' && next == '*':
			i = len(sql) - len(skipComment(sql[i:], nested))
			continue
		case c == ';' && depth == 0:
			if start >= 0 && !fn(sql[start:i]) {
				return
			}
			start, first, prev, trigger = -1, "", "", false
			i++
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == ';':
			i++
			continue
		}
		if start < 0 {
			start = i
		}
		switch {
		case c == '\'':
			i = skipQuoted(sql, i+1, '\'', false)
		case c == '"':
			i = skipQuoted(sql, i+1, '"', false)
		case !pg && c == '`':
			i = skipQuoted(sql, i+1, '`', false)
		case !pg && c == '[':
			if j := strings.IndexByte(sql[i:], ']'); j >= 0 {
				i += j + 1
			} else {
				i = len(sql)
			}
		case pg && c == '$':
			i = skipDollarQuote(sql, i)
		case wordStart(c):
			j := i + 1
			for j < len(sql) && wordPart(sql[j], pg) {
				j++
			}
			w := keyword(sql[i:j])
			i = j
			if pg && w == "E" && i < len(sql) && sql[i] == '\'' { // E'...': backslash escapes
				i = skipQuoted(sql, i+1, '\'', true)
				break
			}
			switch {
			case first == "":
				first = w
			case first != "CREATE":
			case w == "TRIGGER" && !pg && (prev == "CREATE" || prev == "TEMP" || prev == "TEMPORARY"):
				trigger = true
			case w == "BEGIN" && trigger && depth == 0, w == "ATOMIC" && pg && prev == "BEGIN":
				depth++
			case w == "CASE" && depth > 0:
				depth++
			case w == "END" && depth > 0:
				depth--
			}
			prev = w
		default:
			i++
		}
	}
	if start >= 0 {
		fn(sql[start:])
	}
}

// keyword is a word of a statement as eachStatement and firstWord tell
// words apart: one of the keywords they look for, in upper case, or "-"
// for any other word (and "" for none), without a copy (a copy in upper
// case cost every lower-case word of an Exec, Query or QueryRow an
// allocation: 14 for an INSERT of 7 words on SQLite, which reads a text
// twice).
func keyword(w string) string {
	if w == "" {
		return ""
	}
	for _, k := range [...]string{"CREATE", "TRIGGER", "TEMP", "TEMPORARY", "BEGIN", "ATOMIC", "CASE", "END", "E",
		"COMMIT", "ABORT", "START", "PREPARE", "ROLLBACK", "TRANSACTION", "WORK", "TO", "SAVEPOINT", "RELEASE"} {
		if len(w) == len(k) && strings.EqualFold(w, k) {
			return k
		}
	}
	return "-"
}

func wordStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

// wordPart says whether c continues a word: an identifier or keyword (on
// pg one may hold a $, which then starts no dollar quote) or a number's
// letters.
func wordPart(c byte, pg bool) bool {
	return wordStart(c) || c >= '0' && c <= '9' || pg && c == '$'
}

// skipQuoted returns the index after the closing q of a quoted text whose
// contents begin at i (a doubled q stands for itself; with backslash, \
// escapes the next byte), or len(sql) if it is not closed.
func skipQuoted(sql string, i int, q byte, backslash bool) int {
	for ; i < len(sql); i++ {
		switch {
		case backslash && sql[i] == '\\':
			i++
		case sql[i] == q:
			if i+1 < len(sql) && sql[i+1] == q {
				i++
				continue
			}
			return i + 1
		}
	}
	return len(sql)
}

// skipDollarQuote returns the index after the PostgreSQL dollar-quoted
// string ($$...$$ or $tag$...$tag$) starting at sql[i], or i+1 when the $
// starts none (a parameter such as $1).
func skipDollarQuote(sql string, i int) int {
	j := i + 1
	if j < len(sql) && wordStart(sql[j]) {
		for j < len(sql) && (wordStart(sql[j]) || sql[j] >= '0' && sql[j] <= '9') {
			j++
		}
	}
	if j >= len(sql) || sql[j] != '$' {
		return i + 1
	}
	tag := sql[i : j+1]
	k := strings.Index(sql[j+1:], tag)
	if k < 0 {
		return len(sql)
	}
	return j + 1 + k + len(tag)
}

// firstWord returns the first word of sql as keyword reads it (a keyword
// refuseStatement looks for in upper case, another word "-"), after white
// space and comments, and what follows it.
func firstWord(sql string) (string, string) {
	for {
		sql = strings.TrimLeft(sql, " \t\r\n\f\v;")
		switch {
		case strings.HasPrefix(sql, "--"):
			i := strings.IndexByte(sql, '\n')
			if i < 0 {
				return "", ""
			}
			sql = sql[i+1:]
			continue
		case strings.HasPrefix(sql, "/*"):
			sql = skipComment(sql, true)
			continue
		}
		break
	}
	i := 0
	for i < len(sql) && (sql[i] >= 'a' && sql[i] <= 'z' || sql[i] >= 'A' && sql[i] <= 'Z' || sql[i] == '_') {
		i++
	}
	return keyword(sql[:i]), sql[i:]
}

// skipComment returns what follows the /* comment sql begins with, nested
// as PostgreSQL nests them when nested is set (SQLite does not nest them).
func skipComment(sql string, nested bool) string {
	depth := 0
	for i := 0; i+1 < len(sql); i++ {
		switch sql[i : i+2] {
		case "/*":
			if nested || depth == 0 {
				depth++
			}
			i++
		case "*/":
			depth--
			i++
			if depth == 0 {
				return sql[i+1:]
			}
		}
	}
	return ""
}
