package bus

// AuditQueued is how many events wait in a's writer queues, so that a
// test can tell when a writer has taken an event.
func AuditQueued(a *Auditor) int {
	n := 0
	for _, w := range a.writers {
		n += len(w.in)
	}
	return n
}

// AuditEnqueueing reports whether a Record or Seal is inside a's queueing
// section (holding its read lock), as one blocked on a full queue is.
func AuditEnqueueing(a *Auditor) bool {
	if a.mu.TryLock() {
		a.mu.Unlock()
		return false
	}
	return true
}
