package audit

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// Defaults and bounds of Config.
const (
	maxServerAtomicBatch       = 1000
	defaultAuditWriters        = 4
	defaultAuditMaxBatch       = 256
	defaultAuditHeadCache      = 16384
	defaultAuditQueueLen       = 4096
	defaultAuditPublishTimeout = 10 * time.Second
)

// Config configures a Writer. The zero value is usable; every
// field documents its default.
type Config struct {
	// Instance names this gated process in the events it records whose
	// Instance is empty. Default "<hostname>-<pid>".
	Instance string
	// Key MACs every record, so that Verify given the same key tells
	// gated's records from anyone else's. At least MinKeyLen bytes.
	// Default none: records carry their hash and chain link only, and a
	// forged record that follows the format cannot be detected.
	Key []byte
	// Log receives what no caller can act on: conflicts with other gated
	// instances, the fall back to one-at-a-time publishing. Default: none.
	Log *zap.Logger
	// Writers is how many goroutines publish records. Each owns the
	// tenants whose name hashes to it, so one tenant's round trips do not
	// hold up another's. Default 4.
	Writers int
	// MaxBatch bounds the records of one atomic batch (one round trip).
	// Default 256; at most 1000, the server's limit.
	MaxBatch int
	// MaxBatchBytes bounds the bytes of one atomic batch. Default: the
	// connection's max payload.
	MaxBatchBytes int
	// HeadCache bounds how many tenants' chain heads are remembered, over
	// all writers; a forgotten head costs one look-up. Default 16384.
	HeadCache int
	// QueueLen bounds the events waiting for each writer; Record blocks
	// while its writer's queue is full. Default 4096.
	QueueLen int
	// PublishTimeout bounds one publish round trip and one head look-up.
	// Default 10s. A publish that times out fails the trails concerned.
	PublishTimeout time.Duration
	// Publish chooses how queued records go out. Default PublishAuto.
	Publish PublishMode
	// Uncompressed stores each record's body as its JSON. Default false:
	// a body is one zstd frame of its JSON (about half its bytes in the
	// stream and in a replica's traffic), and readers that take the
	// stream's messages themselves decompress it first. A body of more
	// than MaxRecordJSON bytes is stored as JSON either way.
	Uncompressed bool
	// OnSeal, when set, hears how long each trail's Seal took (from its
	// final event queued until every event of the trail is stored) and
	// its error, for metrics. It must not block. Default nil.
	OnSeal func(took time.Duration, err error)
}

// PublishMode chooses between atomic batches and one record per round
// trip. Both check every tenant's chain against the stream, so the chain
// is the same either way; only the cost differs.
type PublishMode int

const (
	// PublishAuto sends atomic batches to a replicated or memory stream,
	// where a batch costs about one round trip, and pipelines records
	// (PublishPipelined) to an R1 file stream (the embedded server's).
	// There the server stages each batch in a file store of its own and
	// syncs it to disk before committing: milliseconds per batch, during
	// which no other write to the stream proceeds, which costs more than
	// batching saves.
	PublishAuto PublishMode = iota
	// PublishBatches sends every group of two records or more as one
	// atomic batch, whatever the stream.
	PublishBatches
	// PublishOneAtATime publishes each record on its own and waits for its
	// acknowledgement. Servers without atomic batches (before 2.12, or a
	// stream without AllowAtomicPublish) get this unless they are asked
	// to pipeline.
	PublishOneAtATime
	// PublishPipelined publishes records one by one without waiting for
	// each acknowledgement, as runs in which every record names its
	// predecessor as the stream's last message (Nats-Expected-Last-Msg-Id)
	// and the first record of each tenant names the tenant's last record.
	// A run is therefore contiguous in the stream: every tenant's chain is
	// checked as with the other modes, and a failure ends the run and
	// publishes the rest again. One writer publishes every tenant (the
	// Writers setting is not used). Each record carries a Nats-Msg-Id, which
	// the stream remembers for its duplicate window. Another instance that
	// writes to the stream ends this one's run, so instances that share a
	// busy audit stream publish faster with atomic batches.
	PublishPipelined
)

func (c Config) withDefaults(nc *nats.Conn) (Config, error) {
	if c.Instance == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "gated"
		}
		c.Instance = host + "-" + strconv.Itoa(os.Getpid())
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	if c.Writers == 0 {
		c.Writers = defaultAuditWriters
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = defaultAuditMaxBatch
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = int(nc.MaxPayload())
	}
	if c.HeadCache == 0 {
		c.HeadCache = defaultAuditHeadCache
	}
	if c.QueueLen == 0 {
		c.QueueLen = defaultAuditQueueLen
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = defaultAuditPublishTimeout
	}
	switch {
	case len(c.Key) > 0 && len(c.Key) < MinKeyLen:
		return c, fmt.Errorf("%w: the audit key has %d bytes; use at least %d random bytes", ErrInvalidConfig, len(c.Key), MinKeyLen)
	case c.Writers < 1:
		return c, fmt.Errorf("%w: audit writers %d must be at least 1", ErrInvalidConfig, c.Writers)
	case c.MaxBatch < 1 || c.MaxBatch > maxServerAtomicBatch:
		return c, fmt.Errorf("%w: audit max batch %d must be between 1 and %d", ErrInvalidConfig, c.MaxBatch, maxServerAtomicBatch)
	case c.MaxBatchBytes < 1:
		return c, fmt.Errorf("%w: audit max batch bytes %d must be positive", ErrInvalidConfig, c.MaxBatchBytes)
	case c.HeadCache < c.Writers:
		return c, fmt.Errorf("%w: audit head cache %d must be at least the %d writers", ErrInvalidConfig, c.HeadCache, c.Writers)
	case c.QueueLen < 1:
		return c, fmt.Errorf("%w: audit queue length %d must be at least 1", ErrInvalidConfig, c.QueueLen)
	case c.Publish < PublishAuto || c.Publish > PublishPipelined:
		return c, fmt.Errorf("%w: unknown audit publish mode %d", ErrInvalidConfig, c.Publish)
	case c.PublishTimeout < 0:
		return c, fmt.Errorf("%w: audit publish timeout %s is negative", ErrInvalidConfig, c.PublishTimeout)
	}
	return c, nil
}
