// Package claimhook lets tests stop a SQLite claim between its commit and
// the read of its jobs' columns (store/queue_lite.go), to force what may
// happen there: another write to a claimed job, the claim's context
// ending. Nothing is installed outside tests; a claim then pays one atomic
// load.
package claimhook

import (
	"sync"
	"sync/atomic"
)

var (
	mu    sync.Mutex
	hooks atomic.Pointer[map[string]func()] // queue -> hook; copied on write
)

// Install makes every SQLite claim of queue call f once it committed and
// before it reads its jobs, until the returned func removes it.
func Install(queue string, f func()) (remove func()) {
	set(queue, f)
	return func() { set(queue, nil) }
}

func set(queue string, f func()) {
	mu.Lock()
	defer mu.Unlock()
	next := map[string]func(){}
	if m := hooks.Load(); m != nil {
		for k, v := range *m {
			if k != queue {
				next[k] = v
			}
		}
	}
	if f != nil {
		next[queue] = f
	}
	if len(next) == 0 {
		hooks.Store(nil)
		return
	}
	hooks.Store(&next)
}

// AfterCommit is the hook installed for queue, or nil.
func AfterCommit(queue string) func() {
	if m := hooks.Load(); m != nil {
		return (*m)[queue]
	}
	return nil
}
