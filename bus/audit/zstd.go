package audit

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// A body of version 2 or 3 is stored either as its JSON or as one zstd frame
// (RFC 8878) of that JSON, no dictionary and no checksum: the body's
// SHA-256 in the next record's chain link and its MAC already cover every
// byte stored. The two tell themselves apart by their first byte, '{'
// against the frame's magic number. The hash and the MAC are of the bytes
// as stored, compressed or not, so compressing changes nothing a record's
// tamper evidence rests on; readers decompress first and then read the
// JSON as before.

// zstdMagic begins every zstd frame.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// MaxRecordJSON bounds the JSON of a compressed record: the writer stores
// a larger body as JSON, and a reader refuses a frame that decompresses to
// more, so that a forged frame cannot make it hold more memory than a
// record of gated's may need. A record's JSON is also bounded by the NATS
// max payload the writer checks it against.
const MaxRecordJSON = 8 << 20

// maxKeptScratch bounds the block a reader keeps for the next record.
const maxKeptScratch = 1 << 20

// blocks lends a block to build a body in before it is compressed
// (encodedEvent.msg), or to decompress one into (MayTrack); a block is
// given back only while it is no larger than maxKeptScratch.
var blocks = sync.Pool{New: func() any { return new([]byte) }}

// isCompressed reports whether a body is a zstd frame.
func isCompressed(body []byte) bool { return bytes.HasPrefix(body, zstdMagic) }

// The encoder and decoder are built once and shared: EncodeAll and
// DecodeAll may be called from any goroutine. The fastest level spends
// a quarter less time than the default on a record of 2 KB, for 4% more
// bytes; a record is written once and read a few times, and the writer's
// time is on the proposal's path.
var (
	zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderCRC(false),
			zstd.WithLowerEncoderMem(true),
		)
		if err != nil {
			panic(fmt.Sprintf("audit: building the zstd encoder: %v", err)) // the options are constants
		}
		return e
	})
	zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderMaxMemory(MaxRecordJSON),
			zstd.WithDecoderMaxWindow(MaxRecordJSON),
			zstd.WithDecoderConcurrency(0),
		)
		if err != nil {
			panic(fmt.Sprintf("audit: building the zstd decoder: %v", err))
		}
		return d
	})
)

// compressBody appends the zstd frame of body to dst.
func compressBody(dst, body []byte) []byte {
	return zstdEncoder().EncodeAll(body, dst)
}

// errNotRecordFrame is why a body that starts as a zstd frame is not a
// record's: it is not one frame alone, names a dictionary, does not
// decompress within MaxRecordJSON, or holds no JSON object of version 2 or 3.
var errNotRecordFrame = errors.New("compressed body")

// recordJSON returns the JSON of a record's body: body itself when it is
// not compressed, and otherwise its frame decompressed into *buf (a new
// block when buf is nil), which the caller keeps while it reads the
// result. Errors wrap errNotRecordFrame and say what is wrong.
func recordJSON(body []byte, buf *[]byte) ([]byte, error) {
	if !isCompressed(body) {
		return body, nil
	}
	if err := oneFrame(body); err != nil {
		return nil, err
	}
	var dst []byte
	if buf != nil {
		dst = (*buf)[:0]
	}
	out, err := zstdDecoder().DecodeAll(body, dst)
	switch {
	case errors.Is(err, zstd.ErrDecoderSizeExceeded), errors.Is(err, zstd.ErrWindowSizeExceeded):
		return nil, fmt.Errorf("%w: decompresses to more than %d bytes", errNotRecordFrame, MaxRecordJSON)
	case err != nil:
		return nil, fmt.Errorf("%w: does not decompress: %v", errNotRecordFrame, err)
	}
	if buf != nil && cap(out) <= maxKeptScratch {
		*buf = out[:0]
	}
	if !bytes.HasPrefix(out, v3Start) && !bytes.HasPrefix(out, v2Start) {
		return nil, fmt.Errorf("%w: does not hold a record of version %d or %d, the versions stored compressed", errNotRecordFrame, RecordVersion, legacyVersion)
	}
	return out, nil
}

// oneFrame checks that body is one zstd frame without a dictionary and
// nothing after it, reading the frame's header and its blocks' headers
// (RFC 8878, 3.1.1), not the blocks. A decoder decompresses a second frame
// after the first, and skips a skippable one; a reader that stops at the
// first frame would see another record than gated does, so a body of two
// is none. A dictionary would bind every reader to it.
func oneFrame(body []byte) error {
	var h zstd.Header
	if err := h.Decode(body); err != nil {
		return fmt.Errorf("%w: frame header: %v", errNotRecordFrame, err)
	}
	if h.DictionaryID != 0 {
		return fmt.Errorf("%w: the frame names dictionary %d; records are compressed without one", errNotRecordFrame, h.DictionaryID)
	}
	end := h.HeaderSize
	for last := false; !last; {
		if len(body)-end < 3 {
			return fmt.Errorf("%w: the frame is cut short", errNotRecordFrame)
		}
		bh := uint32(body[end]) | uint32(body[end+1])<<8 | uint32(body[end+2])<<16
		end += 3
		last = bh&1 == 1
		size := int(bh >> 3)
		switch bh >> 1 & 3 {
		case 1: // RLE: one byte, repeated
			size = 1
		case 3:
			return fmt.Errorf("%w: a block of the reserved type", errNotRecordFrame)
		}
		if len(body)-end < size {
			return fmt.Errorf("%w: the frame is cut short", errNotRecordFrame)
		}
		end += size
	}
	const checksumFlag = 1 << 2 // of the frame header descriptor
	if body[len(zstdMagic)]&checksumFlag != 0 {
		end += 4
	}
	switch {
	case end > len(body):
		return fmt.Errorf("%w: the frame is cut short", errNotRecordFrame)
	case end < len(body):
		return fmt.Errorf("%w: %d bytes after the zstd frame", errNotRecordFrame, len(body)-end)
	}
	return nil
}

// RecordJSON returns the JSON of an audit message's body, for a reader
// that looks at the record as stored (`gated audit tail --json` prints an
// invalid record's body so): the body itself, or a compressed body
// decompressed. ok is false when a compressed body does not decompress
// to a record.
func RecordJSON(body []byte) (json []byte, ok bool) {
	out, err := recordJSON(body, nil)
	return out, err == nil
}
