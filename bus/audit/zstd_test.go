package audit_test

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine/wire"
)

// zstdFrame compresses b as one zstd frame, as anyone with a zstd library
// could.
func zstdFrame(b []byte) []byte {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(false))
	if err != nil {
		panic(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// alter replaces old by new in a record's body, as someone who can write
// the stream could: a compressed body is decompressed first and
// compressed again.
func alter(t *testing.T, body []byte, old, new string) []byte {
	t.Helper()
	js, ok := audit.RecordJSON(body)
	if !ok {
		t.Fatal("the record does not decompress")
	}
	out := bytes.Replace(js, []byte(old), []byte(new), 1)
	if bytes.Equal(out, js) {
		t.Fatalf("%s is not in the record: %s", old, js)
	}
	if bytes.Equal(js, body) {
		return out
	}
	return zstdFrame(out)
}

// TestWriterCompressesRecords: by default the Writer stores each record as
// a zstd frame of its JSON, in fewer bytes, and every reader sees the same
// events as in the record it stores as JSON when configured Uncompressed;
// a stream holding both verifies.
func TestWriterCompressesRecords(t *testing.T) {
	res, js := setupAudit(t)
	compressed := bustest.AuditWriter(t, js, audit.Config{Key: testKey, Instance: "z"})
	plain := bustest.AuditWriter(t, js, audit.Config{Key: testKey, Instance: "z", Uncompressed: true})
	var stored [2]*jetstream.RawStreamMsg
	for i, a := range []*audit.Writer{compressed, plain} {
		tr := a.Trail()
		evs := decisionEvents("acme", "p1")
		for _, ev := range evs[:len(evs)-1] {
			if err := tr.Record(t.Context(), ev); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tr.Seal(t.Context(), evs[len(evs)-1]); err != nil {
			t.Fatal(err)
		}
		m, err := res.Audit.GetLastMsgForSubject(t.Context(), wire.AuditSubjectPrefix+"acme.>")
		if err != nil {
			t.Fatal(err)
		}
		stored[i] = m
	}
	z, p := stored[0], stored[1]
	if !bytes.HasPrefix(z.Data, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		t.Fatalf("the default Writer stored %q…, not a zstd frame", z.Data[:min(len(z.Data), 16)])
	}
	if !bytes.HasPrefix(p.Data, []byte(`{"v":3,`)) {
		t.Fatalf("the Uncompressed Writer stored %q…, not a record's JSON", p.Data[:min(len(p.Data), 16)])
	}
	if len(z.Data) >= len(p.Data)*3/4 {
		t.Errorf("compressed %d bytes against %d as JSON", len(z.Data), len(p.Data))
	}
	zr, err := audit.DecodeRecord(z.Subject, z.Header, z.Data)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := audit.DecodeRecord(p.Subject, p.Header, p.Data)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(zr.Body, z.Data) {
		t.Error("a compressed record's Body is not the bytes stored, which its hash and MAC cover")
	}
	if zr.Chain.N != 1 || pr.Chain.N != 2 || pr.Chain.Prev != hexSHA256(z.Data) {
		t.Fatalf("chain links %+v then %+v; want 1, then 2 linked to the compressed bytes", zr.Chain, pr.Chain)
	}
	assertSameEvents(t, zr.Events(), pr.Events())
	if rep := verify(t, js, audit.VerifyOptions{Keys: [][]byte{testKey}}); !rep.Clean() || rep.Records != 2 {
		t.Fatalf("verify: %d records, problems %+v", rep.Records, rep.Problems)
	}
}

// TestDecodeRecordRefusesBadFrames: a body that begins as a zstd frame is
// a record only when it decompresses, within MaxRecordJSON, to a record of
// version 2; anything else is refused, naming what is wrong, without
// decompressing more than the bound.
func TestDecodeRecordRefusesBadFrames(t *testing.T) {
	good, err := audit.NewCompressedRecordMsg(decisionEvents("acme", "p1"), audit.Chain{N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := audit.DecodeRecord(good.Subject, good.Header, good.Data); err != nil {
		t.Fatalf("the record as built: %v", err)
	}
	json, _ := audit.RecordJSON(good.Data)
	v1 := auditMsg(t, verdictEvent("acme", "p1"), audit.Chain{N: 1}, nil)
	// 64 MiB of JSON white space after a version-2 start: compressed, a
	// few kilobytes.
	bomb := zstdFrame(append([]byte(`{"v":2,`), bytes.Repeat([]byte(" "), 64<<20)...))
	// The record's JSON in two frames, which a decoder concatenates.
	halves := append(zstdFrame(json[:len(json)/2]), zstdFrame(json[len(json)/2:])...)
	// A skippable frame (magic 0x184D2A50, little-endian, then its size).
	skippable := append(bytes.Clone(good.Data), 0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 'a', 'b', 'c', 'd')
	withDict := func() []byte {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderDictRaw(7, []byte(strings.Repeat(`{"v":2,"tenant":"acme"`, 8))))
		if err != nil {
			t.Fatal(err)
		}
		return enc.EncodeAll(json, nil)
	}()
	tests := []struct {
		note, want string
		body       []byte
	}{
		{"a frame cut short", "cut short", good.Data[:len(good.Data)-8]},
		{"a frame's header cut short", "frame header", good.Data[:5]},
		{"a record in two frames", "bytes after the zstd frame", halves},
		{"a skippable frame after the record's", "12 bytes after the zstd frame", skippable},
		{"a frame compressed with a dictionary", "names dictionary 7", withDict},
		{"a record of version 1 compressed", "does not hold a record of version", zstdFrame(v1.Data)},
		{"a frame of what is not a record", "does not hold a record of version", zstdFrame([]byte("garbage"))},
		{"a frame of a record's JSON cut short", "body", zstdFrame(json[:len(json)-2])},
		{"a frame that decompresses to 64 MiB", "decompresses to more than 8388608 bytes", bomb},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := audit.DecodeRecord(good.Subject, good.Header, tc.body)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, audit.ErrInvalidRecord) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want ErrInvalidRecord saying %q", err, tc.want)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 2*audit.MaxRecordJSON {
				t.Errorf("refusing it allocated %d bytes, more than twice MaxRecordJSON", got)
			}
			if audit.MayTrack(tc.body) {
				t.Error("MayTrack takes a body that is not a record's")
			}
		})
	}
}

// TestMayTrackReadsCompressedRecords: the reviewer metrics' pre-filter
// finds a reviewed verdict inside a compressed record and turns a policy
// decision away, as it does for the same records stored as JSON.
func TestMayTrackReadsCompressedRecords(t *testing.T) {
	reviewed := gated.AuditEvent{V: 1, Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p-1",
		Data: []byte(`{"v":1,"proposal_id":"p-1","tenant":"acme","outcome":"approved","stage":"review","reviews":[{"plugin":"sop","decision":"approve"}]}`)}
	for _, tc := range []struct {
		evs  []gated.AuditEvent
		want bool
	}{{[]gated.AuditEvent{reviewed}, true}, {decisionEvents("acme", "p-2"), false}} {
		m, err := audit.NewCompressedRecordMsg(tc.evs, audit.Chain{N: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := audit.MayTrack(m.Data); got != tc.want {
			t.Errorf("MayTrack of a compressed %s record: %v, want %v", tc.evs[len(tc.evs)-1].Event, got, tc.want)
		}
	}
}

// TestLargeRecordStoredAsJSON: a record whose JSON is over MaxRecordJSON
// is stored as JSON, which readers take, rather than as a frame they
// would refuse.
func TestLargeRecordStoredAsJSON(t *testing.T) {
	big := gated.AuditEvent{V: 1, Event: gated.EventPolicyReloaded, Tenant: gated.UnknownTenant,
		Data: []byte(`{"error":"` + strings.Repeat("x", audit.MaxRecordJSON) + `"}`)}
	m, err := audit.NewCompressedRecordMsg([]gated.AuditEvent{big}, audit.Chain{N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(m.Data, []byte(`{"v":3,`)) {
		t.Fatalf("a record of %d bytes was stored as %q…", len(m.Data), m.Data[:8])
	}
	if _, err := audit.DecodeRecord(m.Subject, m.Header, m.Data); err != nil {
		t.Fatal(err)
	}
}

// FuzzRecordJSON feeds the reader of compressed bodies arbitrary frames:
// it never panics, and what it accepts is one frame, nothing after it,
// that a streaming decoder reads to the same JSON, a record of version 3 or 2
// within MaxRecordJSON.
func FuzzRecordJSON(f *testing.F) {
	good, err := audit.NewCompressedRecordMsg(decisionEvents("acme", "p1"), audit.Chain{N: 1}, nil)
	if err != nil {
		f.Fatal(err)
	}
	json, _ := audit.RecordJSON(good.Data)
	f.Add(good.Data)
	f.Add(append(zstdFrame(json[:10]), zstdFrame(json[10:])...))
	f.Add(append(bytes.Clone(good.Data), 0x50, 0x2a, 0x4d, 0x18, 1, 0, 0, 0, 0))
	f.Add(zstdFrame(append([]byte(`{"v":2,`), bytes.Repeat([]byte(" "), 1<<16)...)))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, body []byte) {
		out, ok := audit.RecordJSON(body)
		if !ok || !bytes.HasPrefix(body, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
			return
		}
		if len(out) > audit.MaxRecordJSON || !bytes.HasPrefix(out, []byte(`{"v":3,`)) && !bytes.HasPrefix(out, []byte(`{"v":2,`)) {
			t.Fatalf("accepted a frame of %d bytes that is no record: %q", len(out), out[:min(len(out), 32)])
		}
		// A streaming decoder stops at nothing: it reads every frame.
		d, err := zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderMaxMemory(2*audit.MaxRecordJSON))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		var again bytes.Buffer
		if _, err := again.ReadFrom(d); err != nil {
			t.Fatalf("accepted a frame a streaming decoder refuses: %v", err)
		}
		if !bytes.Equal(again.Bytes(), out) {
			t.Fatalf("accepted a frame that reads as %d bytes, and as %d streamed", len(out), again.Len())
		}
		var h zstd.Header
		if err := h.Decode(body); err != nil || h.DictionaryID != 0 {
			t.Fatalf("accepted a frame whose header reads %+v, %v", h, err)
		}
	})
}
