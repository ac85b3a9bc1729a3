package tests

import "testing"

// TestATransactionalHandlerThatSwallowsItsInterruptedWriteFailsAndKeepsTheClaimsItHeld:
// as TestATransactionalHandlerWhoseWriteItsTimeoutInterruptsKeepsTheClaimsItHeld,
// but the handler ignores the error of its interrupted write and returns
// nil. On SQLite the write's interruption rolled the whole transaction
// back (its writes, the extension of its own claim and of the claims of
// the jobs waiting for the writer): the run failed, whatever the handler
// says. Before, it took the path of a handler that succeeded: its ack
// failed on the rolled back transaction, the job was settled on its own
// after its claim had lapsed (it ran again at once, and was acked by its
// second run) and the waiting jobs' claims had lapsed too (interrupt56).
// It must now settle as the failure it is (retried after its backoff, or
// dead on its last attempt, with an error that says the transaction was
// rolled back), and every other job must run once and be acked. On
// PostgreSQL the interrupted statement aborts the transaction, the ack
// fails and the job is retried by that error: the same body holds.
func TestATransactionalHandlerThatSwallowsItsInterruptedWriteFailsAndKeepsTheClaimsItHeld(t *testing.T) {
	interruptedWriteRounds(t, "swallowed", true)
}
