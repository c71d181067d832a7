package mcpgate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The upstream's log messages and progress reach the agent before the
// answer they precede. The SDK's client runs notification handlers apart
// from the goroutine that reads the upstream, so the answer to a call
// could reach the agent before the call's last log message or progress,
// which the agent then never gets (over streamable HTTP its request's
// stream is closed by then). A noteSink hands them to the handlers in
// the goroutine that reads them instead: over stdio from the connection
// (orderedNotes), over streamable HTTP from the event stream as the SDK
// reads it (sseTap), in both cases before the SDK reads what follows.

// noteSink delivers the upstream's log messages and progress to the
// handlers of opts as they are read.
type noteSink struct {
	opts    *mcp.ClientOptions
	session atomic.Pointer[mcp.ClientSession]

	mu sync.Mutex
	// early counts, by method, the notifications delivered as read that
	// the SDK will hand its handlers again: they skip that many.
	early map[string]int
}

func newNoteSink(opts *mcp.ClientOptions) *noteSink {
	if opts == nil {
		opts = &mcp.ClientOptions{}
	}
	return &noteSink{opts: opts, early: map[string]int{}}
}

// deliver hands the notification method with params to its handler, and
// reports whether it did.
func (n *noteSink) deliver(ctx context.Context, method string, params json.RawMessage) bool {
	cs := n.session.Load()
	if cs == nil {
		return false
	}
	switch {
	case method == "notifications/message" && n.opts.LoggingMessageHandler != nil:
		var p mcp.LoggingMessageParams
		if json.Unmarshal(params, &p) != nil {
			return false
		}
		n.opts.LoggingMessageHandler(ctx, &mcp.LoggingMessageRequest{Session: cs, Params: &p})
	case method == "notifications/progress" && n.opts.ProgressNotificationHandler != nil:
		var p mcp.ProgressNotificationParams
		if json.Unmarshal(params, &p) != nil {
			return false
		}
		n.opts.ProgressNotificationHandler(ctx, &mcp.ProgressNotificationClientRequest{Session: cs, Params: &p})
	default:
		return false
	}
	return true
}

// delivered notes that a notification the SDK will see again was
// delivered early.
func (n *noteSink) delivered(method string) {
	n.mu.Lock()
	n.early[method]++
	n.mu.Unlock()
}

// seen reports whether the SDK's handing of method was delivered early
// already, and takes it off the count.
func (n *noteSink) seen(method string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.early[method] == 0 {
		return false
	}
	n.early[method]--
	return true
}

// options are the client options with handlers that skip what was
// delivered early.
func (n *noteSink) options() *mcp.ClientOptions {
	opts := *n.opts
	if h := n.opts.LoggingMessageHandler; h != nil {
		opts.LoggingMessageHandler = func(ctx context.Context, req *mcp.LoggingMessageRequest) {
			if !n.seen("notifications/message") {
				h(ctx, req)
			}
		}
	}
	if h := n.opts.ProgressNotificationHandler; h != nil {
		opts.ProgressNotificationHandler = func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
			if !n.seen("notifications/progress") {
				h(ctx, req)
			}
		}
	}
	return &opts
}

// orderedNotes is a transport whose connection delivers log messages and
// progress as it reads them, and does not pass them on.
type orderedNotes struct {
	mcp.Transport
	sink *noteSink
}

func (t *orderedNotes) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &orderedConn{Connection: c, sink: t.sink}, nil
}

type orderedConn struct {
	mcp.Connection
	sink *noteSink
}

func (c *orderedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			return nil, err
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok || req.IsCall() || !c.sink.deliver(ctx, req.Method, req.Params) {
			return msg, nil
		}
	}
}

// sseTap is an HTTP transport whose event-stream bodies deliver log
// messages and progress as the SDK reads them. The SDK still reads every
// event (its parsing and resumption are untouched); its handlers skip
// what was delivered.
type sseTap struct {
	base http.RoundTripper
	sink *noteSink
}

func (t *sseTap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp, err
	}
	resp.Body = &tapBody{ReadCloser: resp.Body, sink: t.sink, ctx: req.Context()}
	return resp, nil
}

// tapBody reads an event stream, delivering each whole event's
// notification before the bytes after it are read.
type tapBody struct {
	io.ReadCloser
	sink *noteSink
	ctx  context.Context
	// event is the current event's text so far.
	event []byte
}

// maxTapEvent bounds the event text a tapBody keeps; a longer event is
// left to the SDK alone.
const maxTapEvent = 1 << 20

func (b *tapBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.scan(p[:n])
	return n, err
}

// scan adds data to the current event and delivers each event it ends.
func (b *tapBody) scan(data []byte) {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			b.keep(data)
			return
		}
		b.keep(data[:i+1])
		data = data[i+1:]
		if bytes.HasSuffix(b.event, []byte("\n\n")) || bytes.HasSuffix(b.event, []byte("\n\r\n")) {
			b.dispatch()
		}
	}
}

func (b *tapBody) keep(data []byte) {
	if len(b.event)+len(data) <= maxTapEvent {
		b.event = append(b.event, data...)
	} else {
		b.event = append(b.event[:0], "\x00"...) // too long: not one to deliver
	}
}

// dispatch delivers the event's data when it is a notification.
func (b *tapBody) dispatch() {
	event := b.event
	b.event = b.event[:0]
	var data []byte
	sc := bufio.NewScanner(bytes.NewReader(event))
	sc.Buffer(nil, maxTapEvent+1)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if rest, ok := strings.CutPrefix(line, "data:"); ok {
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, strings.TrimPrefix(rest, " ")...)
		}
	}
	var note struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if len(data) == 0 || json.Unmarshal(data, &note) != nil || note.ID != nil || note.Method == "" {
		return
	}
	if b.sink.deliver(b.ctx, note.Method, note.Params) {
		b.sink.delivered(note.Method)
	}
}
