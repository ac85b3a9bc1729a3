package wake

import (
	"os"
	"syscall"
)

// FileWrites returns a channel that receives a signal (coalesced: it holds
// one) soon after any process writes to the file at path, through inotify,
// and a function that stops it. It fails where inotify is unavailable (out
// of instances or watches, a file system without it): poll instead.
//
// Writes made through a shared mapping raise no event, but SQLite writes
// its WAL with write(2), so a commit by any process on this machine nudges
// the watcher; processes on other machines cannot share a WAL database.
func FileWrites(path string) (<-chan struct{}, func(), error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil, nil, os.NewSyscallError("inotify_init1", err)
	}
	if _, err := syscall.InotifyAddWatch(fd, path, syscall.IN_MODIFY); err != nil {
		syscall.Close(fd)
		return nil, nil, os.NewSyscallError("inotify_add_watch", err)
	}
	// Non-blocking, so reads park on the runtime's poller, not a thread,
	// and Close ends a read in progress.
	f := os.NewFile(uintptr(fd), "inotify")
	out := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Events for one file coalesce in the kernel while unread, and one
		// read takes them all: a busy file costs a wake per read, not per
		// write.
		buf := make([]byte, 64*(syscall.SizeofInotifyEvent+syscall.NAME_MAX+1))
		for {
			if _, err := f.Read(buf); err != nil {
				return // closed (a read fails no other way): the watcher still polls
			}
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out, func() { f.Close(); <-done }, nil
}
