// Package queries embeds the named statements sqlc cannot generate code for
// (SQLite's PRAGMA data_version), so that they still live in queries/ with
// every other statement the library runs.
package queries

import (
	"embed"
	"fmt"
	"strings"
)

//go:embed lite/*.sql pg/*.sql
var files embed.FS

// Statement returns the statement named name ("-- name: Name ...") from the
// dialect's ("pg" or "lite") files.
func Statement(dialect, name string) (string, error) {
	entries, err := files.ReadDir(dialect)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		b, err := files.ReadFile(dialect + "/" + e.Name())
		if err != nil {
			return "", err
		}
		for _, block := range strings.Split(string(b), "-- name: ")[1:] {
			header, body, _ := strings.Cut(block, "\n")
			if strings.Fields(header)[0] != name {
				continue
			}
			var stmt []string
			for _, line := range strings.Split(body, "\n") {
				if !strings.HasPrefix(strings.TrimSpace(line), "--") {
					stmt = append(stmt, line)
				}
			}
			return strings.TrimSpace(strings.Join(stmt, "\n")), nil
		}
	}
	return "", fmt.Errorf("queries: no statement %q for %s", name, dialect)
}
