//go:build !linux

package wake

import "errors"

// FileWrites needs inotify (Linux); elsewhere the watcher polls.
func FileWrites(string) (<-chan struct{}, func(), error) {
	return nil, nil, errors.ErrUnsupported
}
