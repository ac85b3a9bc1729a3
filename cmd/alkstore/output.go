package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// table prints aligned columns.
type table struct{ w *tabwriter.Writer }

func newTable(out io.Writer, header ...string) *table {
	t := &table{w: tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)}
	t.row(toAny(header)...)
	return t
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func (t *table) row(cells ...any) {
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(fmt.Sprint(c))
	}
	fmt.Fprintln(t.w, strings.Join(parts, "\t"))
}

func (t *table) flush() error { return t.w.Flush() }

// done reports what a write command did: with --json the object v, one
// line on stdout (docs/cli-json.md), else the text line on stderr. Write
// commands printed their text line whatever --json said, so a script
// reading JSON lines from every command got none.
func (a *app) done(v any, format string, args ...any) error {
	if a.json {
		return jsonLine(a.out, v)
	}
	fmt.Fprintf(a.errOut, format+"\n", args...)
	return nil
}

// jsonLine prints v as one line of JSON.
func jsonLine(out io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}

// ago says how long ago t was ("3m ago", "in 2h"); "-" for none.
func ago(t *time.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	d := now.Sub(*t)
	if d > -time.Second && d < time.Second {
		return "now"
	}
	if d < 0 {
		return "in " + short(-d)
	}
	return short(d) + " ago"
}

func agoT(t time.Time, now time.Time) string { return ago(&t, now) }

// short rounds a duration to its largest unit: 45s, 12m, 3h, 2d.
func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// preview shows a payload on one line: text as is, cut to n runes;
// binary as its size.
func preview(p []byte, n int) string {
	switch {
	case p == nil:
		return "(nil)"
	case len(p) == 0:
		return `""`
	case !utf8.Valid(p):
		return fmt.Sprintf("(%d bytes)", len(p))
	}
	s := strings.Join(strings.Fields(string(p)), " ")
	if utf8.RuneCountInString(s) > n {
		r := []rune(s)
		return string(r[:n]) + "…"
	}
	return s
}

// payloadJSON is a payload in JSON output: the text when it is valid
// UTF-8 (payload), else base64 (payload_base64).
type payloadJSON struct {
	Text   *string `json:"payload,omitempty"`
	Base64 []byte  `json:"payload_base64,omitempty"`
}

func jsonPayload(p []byte) payloadJSON {
	if p == nil {
		return payloadJSON{}
	}
	if utf8.Valid(p) {
		s := string(p)
		return payloadJSON{Text: &s}
	}
	return payloadJSON{Base64: p}
}

// count shows a capped count with a "+" when it reached the cap.
func count(n int64, capped int64) string {
	if n >= capped {
		return fmt.Sprintf("%d+", n)
	}
	return fmt.Sprint(n)
}
