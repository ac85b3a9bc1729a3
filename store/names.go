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

// validateLocalName checks a consumer, worker or scheduler owner name like
// a mechanism name (1–255 bytes of valid UTF-8 without control characters;
// PostgreSQL's text refuses NUL and invalid UTF-8, SQLite would store them),
// but the reserved prefix is allowed.
func validateLocalName(kind, name string) error {
	return validateText(kind+" name ", name, maxNameLen)
}

// maxCauseLen bounds the error text a job keeps as its LastError.
const maxCauseLen = 8 << 10

// cleanCause makes a handler's error text storable on both engines: invalid
// UTF-8 and NUL become U+FFFD (PostgreSQL's text refuses both, and a cause
// that cannot be stored would leave its job unsettled), and it is cut to
// maxCauseLen bytes at a character boundary.
func cleanCause(cause string) string {
	cause = strings.ReplaceAll(strings.ToValidUTF8(cause, "\uFFFD"), "\x00", "\uFFFD")
	if len(cause) <= maxCauseLen {
		return cause
	}
	cut := maxCauseLen
	for cut > 0 && !utf8.RuneStart(cause[cut]) {
		cut--
	}
	return cause[:cut]
}
