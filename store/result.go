package store

import "fmt"

// OnResult registers fn to be called once with what the handler lifecycle
// (Work, WorkTx, Outbox.Run, RunJob and their typed and client forms) did
// with the run of job that is in progress: the exact outcome, after the
// settle, rather than what the handler's error predicts (HandlerOutcome).
// It is for middleware and observers (the client's job events, alkotel's
// spans and metrics): a settle that failed after the handler returned (the
// claim was lost, or a database error) is reported as it happened, and an
// outbox deliverer's last attempt as OutcomeFailed.
//
// fn runs after the settle, on a goroutine of its own that the worker
// (or RunJob) waits for: for a job that Work completed, once its batched
// ack committed. It must be quick and must not block (it holds up the
// worker's acks); a panic in it is recovered and logged, and so is a
// runtime.Goexit (t.FailNow), which ends only fn's goroutine. A run whose
// handler never returns (it ignored a hard stop) reports nothing. Each run
// reports for itself, in no order across runs: once a run's settle has
// committed, the job's next run may start (on another worker, or another
// Store) and report before this run's fn is called: the last report to
// arrive for a job is not always its latest run's (Queue.Job reads its
// state).
//
// OnResult returns false, and never calls fn, when job is not being run
// by the lifecycle: a job from Claim handled by hand, or a run whose
// result was already reported.
func (j *Job) OnResult(fn func(JobResult)) bool {
	if j == nil || j.mu == nil || fn == nil {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.inRun {
		return false
	}
	if j.result == nil { // the usual one, without a slice to allocate
		j.result = fn
	} else {
		j.results = append(j.results, fn)
	}
	return true
}

// beginRun marks j as run by the lifecycle: OnResult may register. It
// returns the job's claim token as the run begins.
func (j *Job) beginRun() (token int64) {
	if j.mu == nil {
		return j.token
	}
	j.mu.Lock()
	j.inRun, j.result, j.results = true, nil, nil
	token = j.token
	j.mu.Unlock()
	return token
}

// endRun reports res to the functions OnResult registered, once.
func (j *Job) endRun(res JobResult) {
	if j.mu == nil {
		return
	}
	j.mu.Lock()
	first, more := j.result, j.results
	j.inRun, j.result, j.results = false, nil, nil
	j.mu.Unlock()
	if first != nil {
		j.callResult(first, res)
	}
	for _, fn := range more {
		j.callResult(fn, res)
	}
}

// callResult calls fn with res on a goroutine of its own, and waits for
// it: a panic in fn is recovered and logged, and so is a runtime.Goexit
// (t.FailNow in a test's result check), which ends only that goroutine.
// Called on Work's ack loop, such a Goexit ended the loop: the jobs
// finished after it were never acked, and the stop hung, blaming a lock
// (review60a); on a handler goroutine, it ended the settle. The goroutine
// costs only the runs that registered result functions (OnResult).
func (j *Job) callResult(fn func(JobResult), res JobResult) {
	done := make(chan struct{})
	go j.resultCall(fn, res, done)
	<-done
}

// resultCall is callResult's goroutine.
func (j *Job) resultCall(fn func(JobResult), res JobResult, done chan<- struct{}) {
	returned := false
	defer func() {
		p := recover()
		switch {
		case p != nil:
			j.q.s.log.Error("alkstore: a job result function panicked", "queue", j.q.name, "job", j.ID, "panic", fmt.Sprint(p))
		case !returned:
			j.q.s.log.Error("alkstore: a job result function exited its goroutine (runtime.Goexit; t.FailNow called from it?)", "queue", j.q.name, "job", j.ID)
		}
		close(done)
	}()
	fn(res)
	returned = true
}

// hasResultFuncs reports whether OnResult registered functions for j's
// run: only then does a lost ack need a read to say what became of it.
func (j *Job) hasResultFuncs() bool {
	if j.mu == nil {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.result != nil
}
