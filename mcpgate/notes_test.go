package mcpgate

import (
	"bytes"
	"context"
	"io"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// tapped reads stream through a tapBody in chunks of size chunk, and
// returns the log messages delivered, each with how many bytes the reads
// before the one delivering it returned.
func tapped(stream []byte, chunk int) (msgs []string, at []int) {
	read := 0
	sink := newNoteSink(&mcp.ClientOptions{LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
		s, _ := req.Params.Data.(string)
		msgs = append(msgs, s)
		at = append(at, read)
	}})
	sink.session.Store(&mcp.ClientSession{})
	b := &tapBody{ReadCloser: io.NopCloser(bytes.NewReader(stream)), sink: sink, ctx: context.Background()}
	buf := make([]byte, chunk)
	for {
		n, err := b.Read(buf)
		read += n
		if err != nil {
			return msgs, at
		}
	}
}

// TestTapDeliversBeforeWhatFollows: a log message on an event stream is
// delivered once its event ends, before anything after it is read, and
// however the stream is cut into reads.
func TestTapDeliversBeforeWhatFollows(t *testing.T) {
	logEvent := "event: message\r\nid: 1\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"one\"}}\r\n\r\n"
	stream := []byte("id: 0\nretry: 10\ndata: \n\n" + logEvent +
		"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\n" +
		"data: \"params\":{\"level\":\"info\",\"data\":\"two\"}}\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"notifications/message\",\"params\":{\"data\":\"a call, not a notification\"}}\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n")
	end := bytes.Index(stream, []byte(logEvent)) + len(logEvent)
	for _, chunk := range []int{1, 7, 64, len(stream)} {
		msgs, at := tapped(stream, chunk)
		if !slices.Equal(msgs, []string{"one", "two"}) {
			t.Fatalf("chunks of %d: delivered %q, want one and two", chunk, msgs)
		}
		// at counts the bytes of the reads before the one that ends
		// the event: read one byte at a time, that is all but its last.
		if chunk == 1 && at[0] != end-1 {
			t.Fatalf("the first message was delivered after %d bytes, want %d: as its event ended", at[0], end-1)
		}
	}
}

func FuzzTapBody(f *testing.F) {
	f.Add([]byte("data: {\"method\":\"notifications/message\",\"params\":{\"data\":\"x\"}}\n\n"), uint8(3))
	f.Add([]byte("data:{\"method\":\"notifications/message\",\"params\":{}}\r\n\r\ndata: [1]\n\n"), uint8(1))
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint8) {
		whole, _ := tapped(stream, len(stream)+1)
		cut, _ := tapped(stream, int(chunk)+1)
		if !slices.Equal(whole, cut) {
			t.Fatalf("read whole: %q; in chunks of %d: %q", whole, int(chunk)+1, cut)
		}
	})
}
