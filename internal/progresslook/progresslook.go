// Package progresslook tells a context's Err whether SQLite asks it from
// its progress handler, the looks at which the driver interrupts a
// statement whose context ended. Tests use it to end a context at one of
// those looks exactly, instead of by timing.
package progresslook

import (
	"runtime"
	"strings"
)

// FromProgressHandler reports whether the caller (a context's Err method)
// was called, at any depth, from SQLite's progress handler as the
// ncruces driver installs it (Xgo_progress_handler).
func FromProgressHandler() bool {
	var pcs [64]uintptr
	// Skip runtime.Callers, this function and the Err calling it.
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs[:])])
	for {
		f, more := frames.Next()
		if strings.Contains(f.Function, "Xgo_progress_handler") {
			return true
		}
		if !more {
			return false
		}
	}
}
