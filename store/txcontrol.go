package store

import (
	"fmt"
	"strings"
)

// refuseTxControl refuses business SQL that would end or begin a
// transaction through a Tx: BEGIN, START TRANSACTION, COMMIT, END,
// ROLLBACK (but ROLLBACK TO a savepoint), ABORT and PREPARE TRANSACTION.
// Run through the driver transaction, a COMMIT or ROLLBACK ends it behind
// the Tx's back: on PostgreSQL every later statement then commits on its
// own and tx.Commit reports success for writes a ROLLBACK threw away; on
// SQLite a COMMIT stores the transaction and tx.Commit then reports it lost.
// End a Tx with its Commit or Rollback; savepoints (SAVEPOINT, RELEASE,
// ROLLBACK TO) are fine. Only the statement's first words are looked at:
// a transaction-control statement after another in one Exec is found
// after it ran (see Tx.Exec).
func refuseTxControl(sql string) error {
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
			sql = skipBlockComment(sql)
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

// skipBlockComment returns what follows the /* comment sql begins with,
// nested as PostgreSQL nests them (SQLite does not: there a statement after
// "/* /* */" is missed here, and found after it ran).
func skipBlockComment(sql string) string {
	depth := 0
	for i := 0; i+1 < len(sql); i++ {
		switch sql[i : i+2] {
		case "/*":
			depth++
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
