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
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case len(name) > maxNameLen:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidName, len(name), maxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidName)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: contains control character %U", ErrInvalidName, r)
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
