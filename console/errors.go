package console

import (
	"errors"

	"github.com/alkstore/alkstore/store"
)

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

func isBadInput(err error) bool {
	return errors.Is(err, store.ErrInvalidArgument) || errors.Is(err, store.ErrInvalidName) ||
		errors.Is(err, store.ErrReservedName) || errors.As(err, new(badInput))
}

// badInput is a request the console itself refuses.
type badInput struct{ msg string }

func (b badInput) Error() string { return b.msg }
