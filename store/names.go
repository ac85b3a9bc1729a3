package store

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ReservedPrefix starts the names of the library's own objects (the outbox's
// backing queues, for one). Callers cannot use it for their own names.
const ReservedPrefix = "__alk"

const maxNameLen = 255

// MaxKeyLen is the longest key, in bytes, a keyed publish or a key handle
// accepts.
const MaxKeyLen = 1024

// validateName checks a mechanism name (queue, stream, channel, outbox,
// schedule): 1–255 bytes of valid UTF-8 without control characters, and not
// in the reserved namespace.
func validateName(name string) error {
	if err := validateNameShape(name); err != nil {
		return err
	}
	if strings.HasPrefix(name, ReservedPrefix) {
		return fmt.Errorf("%w: the prefix %q is reserved for alkstore", ErrReservedName, ReservedPrefix)
	}
	return nil
}

func validateNameShape(name string) error {
	return validateText("", name, maxNameLen)
}

// validateKey checks an optional compaction key (nil: unkeyed) the way
// names are checked: 1 to MaxKeyLen bytes of valid UTF-8 without NUL or
// other control characters. Every keyed operation checks its key before
// any I/O, so both engines reject the same keys with ErrInvalidName.
func validateKey(key *string) error {
	if key == nil {
		return nil
	}
	return validateText("key ", *key, MaxKeyLen)
}

// validateText checks a name or key: 1 to limit bytes of valid UTF-8
// without control characters. what prefixes the reason ("key " or "").
func validateText(what, s string, limit int) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %sempty", ErrInvalidName, what)
	case len(s) > limit:
		return fmt.Errorf("%w: %s%d bytes, the limit is %d", ErrInvalidName, what, len(s), limit)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %snot valid UTF-8", ErrInvalidName, what)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %scontains control character %U", ErrInvalidName, what, r)
		}
	}
	return nil
}

// validateLocalName checks a consumer or worker name: non-empty only.
func validateLocalName(kind, name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty %s name", ErrInvalidName, kind)
	}
	return nil
}
