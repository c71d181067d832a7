package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gated/gated/plugins/internal/wire"
	"github.com/gated/gated/plugins/pluginv1"
)

// Names of the tools gated itself answers, when a review's bag holds them.
const (
	ToolGetSOPText        = "get_sop_text"
	ToolGetVerdictHistory = "get_verdict_history"
	ToolGetProposal       = "get_proposal"
)

// Errors of CallTool. The host refuses a tool that is not in the review's
// tool bag whatever the reviewer asks for; a reviewer should treat a
// refusal as missing evidence, never as permission.
var (
	// ErrToolDenied means the host refused the call: the tool is not in
	// this review's bag, or the arguments were malformed.
	ErrToolDenied = errors.New("tool call refused by gated")
	// ErrToolFailed means the tool was allowed but did not answer: its
	// provider failed, found nothing, or ran out of time.
	ErrToolFailed = errors.New("tool call failed")
	// ErrNoTools means the host offered no tools for this review.
	ErrNoTools = errors.New("this review has no tools")
)

// ToolCaller answers the tool calls of a review in place of the host. In a
// plugin process the SDK sends tool calls to gated; a ToolCaller exists so
// that a reviewer can be tested without one (see NewRequest). Its errors
// should wrap ErrToolDenied for a refused call and ErrToolFailed for a tool
// that did not answer, as the host's do.
type ToolCaller interface {
	// CallTool runs the named tool for the review with JSON object
	// arguments and returns its JSON result.
	CallTool(ctx context.Context, reviewID, name string, args json.RawMessage) (json.RawMessage, error)
}

// NewRequest returns a copy of req whose tool calls go to tools instead of
// the host. It is meant for tests of a Reviewer: requests that gated sends
// are built by Serve and call gated itself. A nil tools gives a request
// without tools, whose calls fail with ErrNoTools.
func NewRequest(req Request, tools ToolCaller) *Request {
	req.caller = tools
	req.tools = nil
	return &req
}

// CallTool runs one tool of the review's tool bag through the host and
// returns its JSON result. args is marshalled to JSON (nil sends {}).
func (r *Request) CallTool(ctx context.Context, name string, args any) (json.RawMessage, error) {
	if r.tools == nil && r.caller == nil {
		return nil, ErrNoTools
	}
	raw := []byte("{}")
	if args != nil {
		var err error
		switch a := args.(type) {
		case json.RawMessage:
			raw = a
		case []byte:
			raw = a
		default:
			if raw, err = json.Marshal(args); err != nil {
				return nil, fmt.Errorf("encoding arguments of %s: %w", name, err)
			}
		}
	}
	if r.caller != nil {
		return r.caller.CallTool(ctx, r.ReviewID, name, raw)
	}
	out, err := r.tools.CallTool(ctx, &pluginv1.CallToolRequest{ReviewId: r.ReviewID, Name: name, ArgsJson: raw})
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.PermissionDenied, codes.InvalidArgument:
			return nil, fmt.Errorf("%w: %s: %s", ErrToolDenied, name, st.Message())
		case codes.DeadlineExceeded:
			return nil, fmt.Errorf("%w: %s: %w", ErrToolFailed, name, context.DeadlineExceeded)
		case codes.Canceled:
			return nil, fmt.Errorf("%w: %s: %w", ErrToolFailed, name, context.Canceled)
		}
		return nil, fmt.Errorf("%w: %s: %s", ErrToolFailed, name, st.Message())
	}
	return out.GetResultJson(), nil
}

// HasTool reports whether the review's tool bag holds name.
func (r *Request) HasTool(name string) bool {
	for _, t := range r.Persona.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// toolConns dials the host's ToolHost once per broker id and keeps the
// connection for every later review.
type toolConns struct {
	mu     sync.Mutex
	broker *plugin.GRPCBroker
	conns  map[uint32]pluginv1.ToolHostClient
}

func (t *toolConns) setBroker(b *plugin.GRPCBroker) {
	t.mu.Lock()
	t.broker = b
	t.mu.Unlock()
}

func (t *toolConns) client(id uint32) (pluginv1.ToolHostClient, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.conns[id]; ok {
		return c, nil
	}
	if t.broker == nil {
		return nil, errors.New("the host offered tools but no broker is connected")
	}
	cc, err := t.broker.DialWithOptions(id, wire.DialOptions()...)
	if err != nil {
		return nil, fmt.Errorf("dialing the host's tool service: %w", err)
	}
	if t.conns == nil {
		t.conns = map[uint32]pluginv1.ToolHostClient{}
	}
	c := pluginv1.NewToolHostClient(cc)
	t.conns[id] = c
	return c, nil
}
