package store

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// MaxHeadersSize bounds a message's headers: the bytes of every key and
// value added up. Headers are small metadata that ride with a job or an
// event (trace context, a tenant, a correlation id), like Kafka record
// headers, not a second payload: 4 KiB holds a W3C traceparent and a
// tracestate many times over. Headers that insert middleware adds count
// too (alkotel adds its trace context only where it fits). Past the bound, and for an empty key or a
// key or value that is not valid UTF-8 or holds a NUL byte, the write
// fails with ErrInvalidArgument.
const MaxHeadersSize = 4096

// checkHeaders validates h and returns its stored form: a JSON object, or
// nil when h is empty (stored as NULL; a message without headers costs no
// encoding).
func checkHeaders(h map[string]string) ([]byte, error) {
	if len(h) == 0 {
		return nil, nil
	}
	size := 0
	for k, v := range h {
		size += len(k) + len(v)
		if err := CheckHeader(k, v); err != nil {
			return nil, err
		}
	}
	if size > MaxHeadersSize {
		return nil, fmt.Errorf("%w: headers of %d bytes exceed MaxHeadersSize (%d)", ErrInvalidArgument, size, MaxHeadersSize)
	}
	return encodeHeaders(h), nil
}

// CheckHeader returns the error (ErrInvalidArgument) a write fails with
// for a header of this key and value, whatever its size: an empty key, or
// a key or value that is not valid UTF-8 or holds a NUL byte. Insert
// middleware that adds headers it does not control (a propagator's) leaves
// out those the store refuses.
func CheckHeader(key, value string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: a header with an empty name", ErrInvalidArgument)
	case !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0:
		return fmt.Errorf("%w: header name %q is not valid UTF-8 without NUL bytes", ErrInvalidArgument, key)
	case !utf8.ValidString(value) || strings.IndexByte(value, 0) >= 0:
		return fmt.Errorf("%w: header %q's value is not valid UTF-8 without NUL bytes", ErrInvalidArgument, key)
	}
	return nil
}

// StoredHeadersSize is the bytes headers take as stored, which
// MaxBatchSize counts: their JSON object, 0 for none. Adding headers a to
// a message's headers grows their stored size by at most
// StoredHeadersSize(a).
func StoredHeadersSize(h map[string]string) int {
	if len(h) == 0 {
		return 0
	}
	// Without encoding (Insert.Size counts every message's headers) when
	// JSON writes every key and value as itself: '{', then each "k":"v"
	// with its ',' or the closing '}'.
	size := 1
	for k, v := range h {
		if !plainJSON(k) || !plainJSON(v) {
			return len(encodeHeaders(h))
		}
		size += len(k) + len(v) + len(`"":"",`)
	}
	return size
}

// plainJSON reports whether json.Marshal writes s as itself between its
// quotes: printable ASCII but '"', '\\' and the HTML characters it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// encodeHeaders is the stored form of headers already checked: nil for none.
func encodeHeaders(h map[string]string) []byte {
	if len(h) == 0 {
		return nil
	}
	b, _ := json.Marshal(h) // a map of strings always encodes
	return b
}

// headersFor checks the headers of the i-th message of a batch (what
// names it in an error: "job" or "message").
func headersFor(what string, i int, batch bool, h map[string]string) ([]byte, error) {
	b, err := checkHeaders(h)
	if err != nil && batch {
		err = fmt.Errorf("%s %d: %w", what, i, err)
	}
	return b, err
}

// decodeHeaders reads the stored form: nil for NULL (rows written before
// headers existed read so too).
func decodeHeaders[B []byte | string](js B) map[string]string {
	if len(js) == 0 {
		return nil
	}
	if h, ok := decodePlainHeaders(string(js)); ok {
		return h
	}
	var h map[string]string
	if json.Unmarshal([]byte(js), &h) != nil {
		return nil // written only by alkstore's statements; never malformed
	}
	return h
}

// decodePlainHeaders reads the common stored form without the JSON
// decoder: an object of strings without escapes (a traceparent, a tenant),
// as json.Marshal writes it and PostgreSQL's jsonb prints it (a space after
// ':' and ','). ok is false for anything else (escapes included), which
// the JSON decoder reads. Claims decode every job's headers, so this is on
// the burn-down's path.
func decodePlainHeaders(js string) (h map[string]string, ok bool) {
	for k := 0; k < len(js); k++ {
		if c := js[k]; c == '\\' || c < 0x20 {
			return nil, false // escapes, or what JSON refuses
		}
	}
	if !utf8.ValidString(js) {
		return nil, false
	}
	i := 0
	skip := func() {
		for i < len(js) && js[i] == ' ' {
			i++
		}
	}
	str := func() (string, bool) {
		skip()
		if i >= len(js) || js[i] != '"' {
			return "", false
		}
		end := strings.IndexByte(js[i+1:], '"')
		if end < 0 {
			return "", false
		}
		v := js[i+1 : i+1+end]
		i += end + 2
		return v, true
	}
	expect := func(c byte) bool {
		skip()
		if i < len(js) && js[i] == c {
			i++
			return true
		}
		return false
	}
	if !expect('{') {
		return nil, false
	}
	h = make(map[string]string, strings.Count(js, ":"))
	if expect('}') {
		return h, i == len(js)
	}
	for {
		k, ok1 := str()
		if !ok1 || !expect(':') {
			return nil, false
		}
		v, ok2 := str()
		if !ok2 {
			return nil, false
		}
		h[k] = v
		if expect('}') {
			skip()
			return h, i == len(js)
		}
		if !expect(',') {
			return nil, false
		}
	}
}

// decodeHeadersPtr is decodeHeaders for a nullable text column.
func decodeHeadersPtr(js *string) map[string]string {
	if js == nil {
		return nil
	}
	return decodeHeaders(*js)
}

// liteHeaders is the stored form as SQLite's text column takes it.
func liteHeaders(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// pgJSON is JSON the store encoded (headers, an ack's claims) as
// PostgreSQL's statements take it: the text of a jsonb parameter (for
// headers, "" is none: NULL). A string, not a []byte: pgx sends a string
// as text in every query mode, where under QueryExecModeExec and the
// simple protocol (PgBouncer's usual settings) it sends a []byte as
// bytea, "\x7b...", which jsonb refuses (SQLSTATE 22P02). The string
// shares b's bytes without a copy: b is a fresh encoding that nothing
// writes to again, and pgx copies an argument into its message (or, on
// the simple protocol, into the statement's text) before the call
// returns, keeping no reference to it.
func pgJSON(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// pgJSONOrNull is pgJSON for a nullable parameter: nil (NULL) for no
// headers (an empty encoding), where the statement took "" and turned it
// into NULL with NULLIF, which PostgreSQL set up for every statement
// (callgrind: 1.5k instructions of a one-row enqueue's 218k).
func pgJSONOrNull(b []byte) *string {
	if len(b) == 0 {
		return nil
	}
	s := pgJSON(b)
	return &s
}
