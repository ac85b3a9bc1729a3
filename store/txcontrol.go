package store

import (
	"fmt"
	"strings"
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
func refuseTxControl(sql string, pg bool) error {
	var err error
	check := func(stmt string) bool {
		err = refuseStatement(stmt)
		return err == nil
	}
	eachStatement(sql, pg, true, check)
	if err == nil && !pg {
		eachStatement(sql, pg, false, check)
	}
	return err
}

// refuseStatement looks at one statement's first words.
func refuseStatement(sql string) error {
	w, rest := firstWord(sql)
	switch w {
	case "BEGIN", "COMMIT", "END", "ABORT":
	case "START", "PREPARE": // START TRANSACTION, PREPARE TRANSACTION 'id'
		if n, _ := firstWord(rest); n != "TRANSACTION" {
			return nil
		}
	case "ROLLBACK": // ROLLBACK [TRANSACTION | WORK] TO [SAVEPOINT] name keeps the transaction
		n, more := firstWord(rest)
		if n == "TRANSACTION" || n == "WORK" {
			n, _ = firstWord(more)
		}
		if n == "TO" {
			return nil
		}
	default:
		return nil
	}
	return fmt.Errorf("%w: %s through a Tx would end or begin a transaction behind its back: end a Tx with its Commit or Rollback (savepoints are fine)", ErrInvalidArgument, w)
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
			w := strings.ToUpper(sql[i:j])
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

// firstWord returns the first word of sql in upper case, after white space
// and comments, and what follows it.
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
	return strings.ToUpper(sql[:i]), sql[i:]
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
