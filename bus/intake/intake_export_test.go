package intake

// SetPublish replaces how w publishes verdicts, so that a test can make
// publishing fail. Call it before Start.
func SetPublish(w *Worker, publish func(subject string, data []byte) error) { w.publish = publish }
