// Command mcp-ops is a small MCP server of operations tools, the server
// that the examples and tests put gated mcp in front of. Its tools act on
// nothing real: list_services lists a fixed set of services,
// restart_service and drop_table say what they would have done. Every
// call it executes is appended to the --log file as one JSON line, so a
// test (or a reader of docs/MCP.md) can see which calls reached it.
//
//	mcp-ops [--log FILE]              serve MCP over stdio
//	mcp-ops --http 127.0.0.1:8931     serve MCP over streamable HTTP at /mcp
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mcp-ops:", err)
		os.Exit(1)
	}
}

// Call is one line of the --log file: a tool call the server executed.
type Call struct {
	At        time.Time       `json:"at"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// callLog appends executed calls to a file, one JSON line each.
type callLog struct {
	mu sync.Mutex
	f  *os.File
}

func (l *callLog) record(tool string, args any) error {
	if l == nil {
		return nil
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("encoding the arguments of %s: %w", tool, err)
	}
	line, err := json.Marshal(Call{At: time.Now().UTC(), Tool: tool, Arguments: raw})
	if err != nil {
		return fmt.Errorf("encoding the log line of %s: %w", tool, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("writing the call log: %w", err)
	}
	return nil
}

// ListArgs are list_services' arguments.
type ListArgs struct {
	Host string `json:"host,omitempty" jsonschema:"host whose services to list; all hosts when empty"`
}

// RestartArgs are restart_service's arguments.
type RestartArgs struct {
	Host    string `json:"host" jsonschema:"host the service runs on"`
	Service string `json:"service" jsonschema:"name of the service to restart"`
}

// DropArgs are drop_table's arguments.
type DropArgs struct {
	Database string `json:"database" jsonschema:"database holding the table"`
	Table    string `json:"table" jsonschema:"table to drop"`
}

// Service is one entry of list_services' answer.
type Service struct {
	Host    string `json:"host"`
	Service string `json:"service"`
	State   string `json:"state"`
}

// ServiceList is list_services' structured answer.
type ServiceList struct {
	Services []Service `json:"services"`
}

var services = []Service{
	{Host: "web-1", Service: "nginx", State: "running"},
	{Host: "web-1", Service: "app", State: "running"},
	{Host: "db-1", Service: "postgres", State: "running"},
}

func yes() *bool { b := true; return &b }

// newServer returns the MCP server with its three tools, logging executed
// calls to log (nil: no log).
func newServer(log *callLog) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcp-ops", Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "list_services",
		Description: "List the services of a host, or of every host.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, a ListArgs) (*mcp.CallToolResult, ServiceList, error) {
		if err := log.record("list_services", a); err != nil {
			return nil, ServiceList{}, err
		}
		out := ServiceList{Services: []Service{}}
		for _, s := range services {
			if a.Host == "" || a.Host == s.Host {
				out.Services = append(out.Services, s)
			}
		}
		return nil, out, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "restart_service",
		Description: "Restart a service on a host.",
	}, func(_ context.Context, _ *mcp.CallToolRequest, a RestartArgs) (*mcp.CallToolResult, any, error) {
		if a.Host == "" || a.Service == "" {
			return nil, nil, errors.New("restart_service needs a host and a service")
		}
		if err := log.record("restart_service", a); err != nil {
			return nil, nil, err
		}
		return text(fmt.Sprintf("restarted %s on %s", a.Service, a.Host)), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "drop_table",
		Description: "Drop a table from a database.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: yes()},
	}, func(_ context.Context, _ *mcp.CallToolRequest, a DropArgs) (*mcp.CallToolResult, any, error) {
		if a.Database == "" || a.Table == "" {
			return nil, nil, errors.New("drop_table needs a database and a table")
		}
		if err := log.record("drop_table", a); err != nil {
			return nil, nil, err
		}
		return text(fmt.Sprintf("dropped table %s from %s", a.Table, a.Database)), nil, nil
	})
	return s
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mcp-ops", flag.ContinueOnError)
	logFile := fs.String("log", "", "append every executed tool call to this file, one JSON line each")
	httpAddr := fs.String("http", "", "serve streamable HTTP at http://ADDR/mcp instead of stdio")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var log *callLog
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("opening the call log: %w", err)
		}
		defer f.Close()
		log = &callLog{f: f}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	server := newServer(log)
	if *httpAddr == "" {
		return server.Run(ctx, &mcp.StdioTransport{})
	}
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", *httpAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	// The address actually bound, for a caller that asked for port 0.
	fmt.Fprintf(os.Stderr, "mcp-ops: serving http://%s/mcp\n", ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
