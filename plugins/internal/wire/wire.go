// Package wire holds the go-plugin glue that the host and the SDK share:
// the handshake, the plugin set and the gRPC plugin type.
package wire

import (
	"context"
	"runtime"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/gated/gated/internal/telemetry"
	"github.com/gated/gated/plugins/pluginv1"
)

// ProtocolVersion is the plugin protocol version this build speaks.
const ProtocolVersion = 1

// PluginName is the name the reviewer is dispensed under.
const PluginName = "reviewer"

// Handshake is checked by both sides before anything else: a binary that
// is not a gated reviewer plugin, or is launched by hand, stops at once.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "GATED_PLUGIN",
	MagicCookieValue: "reviewer",
}

// MaxMessageBytes bounds gRPC messages in both directions.
const MaxMessageBytes = 8 << 20

// DefaultMaxConcurrency is how many reviews the host runs at once on a
// plugin when neither the plugin's spec nor the plugin sets a limit.
const DefaultMaxConcurrency = 16

// StreamWorkers is how many standing goroutines serve gRPC calls on the
// host's side: one per core, as grpc-go advises.
func StreamWorkers() uint32 { return uint32(max(runtime.GOMAXPROCS(0), 1)) }

// heldStreams is how many streams the host's go-plugin client keeps open
// on a plugin's server for as long as the connection lasts (the broker's
// and stdio's). Each holds a stream worker for good.
const heldStreams = 2

// PluginStreamWorkers is how many standing goroutines serve gRPC calls on
// a plugin's server. A call that finds no worker idle runs on a new
// goroutine instead, whose small stack is copied to a larger one again and
// again as the review goes deeper; a worker's stack has grown once. So
// besides the workers go-plugin's streams hold there is one for each
// review the host runs at once by default, or for each core if there are
// more.
func PluginStreamWorkers() uint32 {
	return uint32(heldStreams + max(runtime.GOMAXPROCS(0), DefaultMaxConcurrency))
}

// Window is the static HTTP/2 flow-control window on both sides. Setting
// it turns off grpc-go's bandwidth estimator, whose pings on every message
// cost each small call extra wake-ups in both processes.
const Window = 1 << 20

// ServerOptions are the gRPC server options of both sides: message limits,
// the static window, and standing stream workers, as many as workers says
// (StreamWorkers on the host's side, PluginStreamWorkers on a plugin's).
func ServerOptions(workers uint32) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.InitialWindowSize(Window),
		grpc.InitialConnWindowSize(Window),
		grpc.NumStreamWorkers(workers),
		// The caller's trace context, when it sent one, becomes the
		// handler's remote parent span.
		grpc.ChainUnaryInterceptor(telemetry.UnaryServerInterceptor()),
	}
}

// DialOptions are the gRPC client options of both sides.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
		grpc.WithInitialWindowSize(Window),
		grpc.WithInitialConnWindowSize(Window),
		// The trace context of the call goes in its metadata, so that a
		// plugin's spans are children of gated's review span.
		grpc.WithChainUnaryInterceptor(telemetry.UnaryClientInterceptor()),
	}
}

// Conn is what the host gets when it dispenses the reviewer.
type Conn struct {
	Reviewer pluginv1.ReviewerClient
	Broker   *plugin.GRPCBroker
}

// ReviewerPlugin is the go-plugin plugin type for protocol version 1.
// Impl is set on the plugin side and nil on the host side.
type ReviewerPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl pluginv1.ReviewerServer
}

// BrokerUser is a ReviewerServer that dials the host's ToolHost through
// the broker.
type BrokerUser interface {
	UseBroker(b *plugin.GRPCBroker)
}

// GRPCServer registers the plugin's Reviewer service and hands it the
// broker.
func (p *ReviewerPlugin) GRPCServer(b *plugin.GRPCBroker, s *grpc.Server) error {
	if u, ok := p.Impl.(BrokerUser); ok {
		u.UseBroker(b)
	}
	pluginv1.RegisterReviewerServer(s, p.Impl)
	return nil
}

// GRPCClient returns the host's view of the plugin.
func (p *ReviewerPlugin) GRPCClient(_ context.Context, b *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return &Conn{Reviewer: pluginv1.NewReviewerClient(cc), Broker: b}, nil
}

// PluginSets lists the plugin types per protocol version, so a version 2
// can be added next to version 1.
func PluginSets(server pluginv1.ReviewerServer) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		ProtocolVersion: {PluginName: &ReviewerPlugin{Impl: server}},
	}
}
