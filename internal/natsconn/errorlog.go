package natsconn

import (
	"errors"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// ErrorLog logs the errors the server reports on a connection without
// closing it. A permissions violation means the account's configuration
// denies gated a subject it needs (docs/NATS.md lists them): the operation
// was dropped, so it is an error, not a warning.
func ErrorLog(log *zap.Logger) nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		fields := []zap.Field{zap.Error(err)}
		if sub != nil {
			fields = append(fields, zap.String("subscription", sub.Subject))
		}
		if errors.Is(err, nats.ErrPermissionViolation) {
			log.Error("NATS refused an operation: the account's permissions lack a right gated needs", fields...)
			return
		}
		log.Warn("NATS connection error", fields...)
	})
}
