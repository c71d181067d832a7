package intake

// TurnsOf counts the proposals of tenant holding a turn, waiting to take
// one back after their reviews, and waiting for their first.
func TurnsOf(w *Worker, tenant string) (running, returning, waiting int) {
	w.tmu.Lock()
	defer w.tmu.Unlock()
	if t := w.tenants[tenant]; t != nil {
		return t.running, len(t.returning), len(t.waiting)
	}
	return 0, 0, 0
}

// Stopping reports whether w's Stop has begun.
func Stopping(w *Worker) bool {
	select {
	case <-w.stopping:
		return true
	default:
		return false
	}
}
