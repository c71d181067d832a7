package mcpgate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gated/gated/internal/strictjson"
)

// DefaultMaxLineLength is the longest JSON-RPC message StdioTransport
// reads: 4 MiB, as the SDK's own stdio transport.
const DefaultMaxLineLength = 4 << 20

// StdioTransport serves MCP over newline-delimited JSON-RPC on a pair of
// streams, standard input and output by default. Unlike the SDK's
// stdio transport, which ends the session at the first line it cannot
// read, it answers a malformed line with a JSON-RPC error (parse error
// -32700 for a line that is not JSON, invalid request -32600 for one that
// is not a JSON-RPC 2.0 message) and reads on: one bad line from an agent
// neither ends its session nor reaches the upstream server.
type StdioTransport struct {
	// In is where messages are read; default os.Stdin.
	In io.Reader
	// Out is where messages are written; default os.Stdout.
	Out io.Writer
	// MaxLineLength bounds one message; default DefaultMaxLineLength.
	MaxLineLength int

	// pass, when set, sees every well-formed request first, in the
	// goroutine that read it, with the line's JSON object; it returns
	// true for one it has answered itself (Gate.RunStdio).
	pass func(c *lineConn, req *jsonrpc.Request, line map[string]any) bool
	// answered, when set, sees every response written, before it is.
	answered func(resp *jsonrpc.Response)
}

var _ mcp.Transport = (*StdioTransport)(nil)

// Connect starts reading In and returns the connection.
func (t *StdioTransport) Connect(context.Context) (mcp.Connection, error) {
	in, out, max := t.In, t.Out, t.MaxLineLength
	if in == nil {
		in = os.Stdin
	}
	if out == nil {
		out = os.Stdout
	}
	if max <= 0 {
		max = DefaultMaxLineLength
	}
	c := &lineConn{out: out, msgs: make(chan jsonrpc.Message), done: make(chan struct{}), readErr: make(chan error, 1), pass: t.pass, answered: t.answered}
	go c.read(bufio.NewReaderSize(in, 64<<10), max)
	return c, nil
}

// lineConn is one session over a pair of streams.
type lineConn struct {
	wmu      sync.Mutex
	out      io.Writer
	msgs     chan jsonrpc.Message
	readErr  chan error
	done     chan struct{}
	once     sync.Once
	pass     func(c *lineConn, req *jsonrpc.Request, line map[string]any) bool
	answered func(resp *jsonrpc.Response)
}

// read hands each well-formed message to Read and answers the others,
// until the input ends or the connection is closed.
func (c *lineConn) read(r *bufio.Reader, max int) {
	for {
		line, tooLong, err := readLine(r, max)
		if err != nil {
			c.readErr <- err
			return
		}
		if tooLong {
			c.writeError(&LineError{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("invalid request: message longer than %d bytes", max)})
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		msg, obj, lerr := decodeLine(line)
		if lerr != nil {
			c.writeError(lerr)
			continue
		}
		if req, ok := msg.(*jsonrpc.Request); ok && c.pass != nil && c.pass(c, req, obj) {
			continue
		}
		select {
		case c.msgs <- msg:
		case <-c.done:
			return
		}
	}
}

// readLine reads one line of at most max bytes; a longer one is read to
// its end and reported as tooLong.
func readLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf)+len(chunk) > max {
			tooLong = true
		} else {
			buf = append(buf, chunk...)
		}
		switch {
		case err == nil:
			return buf, tooLong, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(buf) > 0 && !tooLong:
			return buf, false, nil // a last line without a newline
		default:
			return nil, false, err
		}
	}
}

func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case m := <-c.msgs:
		return m, nil
	case err := <-c.readErr:
		c.readErr <- err // every later Read ends too
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		return nil, io.EOF
	}
}

func (c *lineConn) Write(_ context.Context, msg jsonrpc.Message) error {
	if resp, ok := msg.(*jsonrpc.Response); ok && c.answered != nil {
		c.answered(resp)
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("encoding a JSON-RPC message: %w", err)
	}
	return c.writeLine(data)
}

func (c *lineConn) writeLine(data []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.out.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("writing a JSON-RPC message: %w", err)
	}
	return nil
}

func (c *lineConn) writeError(e *LineError) { _ = c.writeLine(e.Response()) }

func (c *lineConn) Close() error {
	c.once.Do(func() { close(c.done) })
	return nil
}

func (c *lineConn) SessionID() string { return "" }

// LineError is the JSON-RPC error answering a line that is not a
// well-formed JSON-RPC 2.0 message.
type LineError struct {
	// ID is the request's id when it could be read, else nil (the
	// response's id is then null).
	ID any
	// Code is jsonrpc.CodeParseError or jsonrpc.CodeInvalidRequest.
	Code int64
	// Message says what is wrong.
	Message string
}

func (e *LineError) Error() string { return e.Message }

// Response is the error response to send, one JSON object.
func (e *LineError) Response() []byte {
	data, err := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      any    `json:"id"`
		Error   struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: e.ID, Error: struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	}{e.Code, e.Message}})
	if err != nil {
		// Only an id that cannot be encoded gets here; answer without it.
		return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":null,"error":{"code":%d,"message":%q}}`, e.Code, e.Message)
	}
	return data
}

// DecodeLine reads one line of a newline-delimited JSON-RPC stream into
// a message, or says why it is not one: not JSON (parse error), not one
// JSON object (a batch included: MCP has none), a key named twice, or
// not a JSON-RPC 2.0 message (invalid request, with the request's id
// when it has a usable one).
func DecodeLine(line []byte) (jsonrpc.Message, *LineError) {
	msg, _, lerr := decodeLine(line)
	return msg, lerr
}

// decodeLine is DecodeLine, and the line's JSON object as read.
func decodeLine(line []byte) (jsonrpc.Message, map[string]any, *LineError) {
	v, err := strictjson.ReadValue(line, strictjson.ValueOptions{MaxDepth: 128})
	if err != nil {
		var ve *strictjson.ValueError
		if errors.As(err, &ve) {
			return nil, nil, &LineError{Code: jsonrpc.CodeInvalidRequest, Message: "invalid request: " + err.Error()}
		}
		return nil, nil, &LineError{Code: jsonrpc.CodeParseError, Message: "parse error: " + err.Error()}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, nil, &LineError{Code: jsonrpc.CodeInvalidRequest, Message: "invalid request: a message must be one JSON object"}
	}
	msg, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		return nil, nil, &LineError{ID: usableID(obj["id"]), Code: jsonrpc.CodeInvalidRequest, Message: "invalid request: " + err.Error()}
	}
	return msg, obj, nil
}

// usableID is id when a response may carry it: a string or a number.
func usableID(id any) any {
	switch id.(type) {
	case string, json.Number:
		return id
	}
	return nil
}
