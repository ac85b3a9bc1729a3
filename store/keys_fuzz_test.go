package store

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzValidateKey checks validateKey against the rule it implements: a key
// is accepted exactly when it is 1 to MaxKeyLen bytes of valid UTF-8 with
// no control character, and every rejection is ErrInvalidName. The seeds
// run with every go test.
func FuzzValidateKey(f *testing.F) {
	for _, seed := range []string{"", "k", "user:42", "ключ", "emoji 🔑", "a\x00b", "\xff", "\xed\xa0\x80",
		"tab\there", "del\x7f", "c1\u0085", strings.Repeat("k", MaxKeyLen), strings.Repeat("k", MaxKeyLen+1),
		strings.Repeat("é", MaxKeyLen/2) + "x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := validateKey(&key)
		want := key != "" && len(key) <= MaxKeyLen && utf8.ValidString(key) &&
			!strings.ContainsFunc(key, unicode.IsControl)
		if want != (err == nil) {
			t.Fatalf("validateKey(%q) = %v, want accepted %v", key, err, want)
		}
		if err != nil && !errors.Is(err, ErrInvalidName) {
			t.Fatalf("validateKey(%q) = %v, not ErrInvalidName", key, err)
		}
	})
}
