// Command upstream is an MCP server that implements the server scenarios
// of the MCP conformance suite (@modelcontextprotocol/conformance): the
// tools, resources, prompts and completions each scenario asks for. The
// gated mcp conformance test runs the suite against it directly and
// through gated mcp, over streamable HTTP (--http ADDR) and over stdio
// (the default).
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// pngPixel is a 1x1 PNG image.
var pngPixel, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")

// wavSilence is a WAV file of one silent sample.
var wavSilence = func() []byte {
	h := []byte("RIFF\x26\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x40\x1f\x00\x00\x80\x3e\x00\x00\x02\x00\x10\x00data\x02\x00\x00\x00\x00\x00")
	return h
}()

func main() {
	addr := flag.String("http", "", "serve streamable HTTP at http://ADDR/mcp (default: stdio)")
	flag.Parse()
	s := newServer()
	if *addr == "" {
		if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			log.Fatal(err)
		}
		return
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)}))
	fmt.Fprintf(os.Stderr, "upstream: serving MCP at http://%s/mcp\n", ln.Addr())
	log.Fatal((&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(ln))
}

func newServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "conformance-upstream", Version: "1.0.0"}, &mcp.ServerOptions{
		Instructions: "A server for the MCP conformance suite's server scenarios.",
		Capabilities: &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}},
		CompletionHandler: func(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			values := []string{}
			for _, v := range []string{"paris", "park", "party"} {
				if strings.HasPrefix(v, req.Params.Argument.Value) {
					values = append(values, v)
				}
			}
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: values, Total: len(values)}}, nil
		},
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	addTools(s)
	addResources(s)
	addPrompts(s)
	return s
}

func text(t string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: t}}}
}

// tool adds a tool whose input schema is schema (JSON), "" for none.
func tool(s *mcp.Server, name, schema string, h mcp.ToolHandler) {
	if schema == "" {
		schema = `{"type":"object","properties":{}}`
	}
	s.AddTool(&mcp.Tool{Name: name, Description: "conformance tool " + name, InputSchema: json.RawMessage(schema)}, h)
}

// argument is the string argument name of a call.
func argument(req *mcp.CallToolRequest, name string) string {
	var args map[string]any
	_ = json.Unmarshal(req.Params.Arguments, &args)
	s, _ := args[name].(string)
	return s
}

func addTools(s *mcp.Server) {
	tool(s, "test_simple_text", "", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text("This is a simple text response for testing."), nil
	})
	tool(s, "test_image_content", "", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: pngPixel, MIMEType: "image/png"}}}, nil
	})
	tool(s, "test_audio_content", "", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.AudioContent{Data: wavSilence, MIMEType: "audio/wav"}}}, nil
	})
	tool(s, "test_embedded_resource", "", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
			URI: "test://embedded-resource", MIMEType: "text/plain", Text: "This is an embedded resource content."}}}}, nil
	})
	tool(s, "test_multiple_content_types", "", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: "Multiple content types test:"},
			&mcp.ImageContent{Data: pngPixel, MIMEType: "image/png"},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "test://mixed-content-resource", MIMEType: "application/json", Text: `{"test":"data","value":123}`}},
		}}, nil
	})
	tool(s, "test_tool_with_logging", "", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		for i, msg := range []string{"Tool execution started", "Tool processing data", "Tool execution completed"} {
			if i > 0 {
				time.Sleep(50 * time.Millisecond)
			}
			_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "conformance", Data: msg})
		}
		return text("Tool with logging executed successfully"), nil
	})
	tool(s, "test_tool_with_progress", "", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		token := req.Params.GetProgressToken()
		for i, p := range []float64{0, 50, 100} {
			if i > 0 {
				time.Sleep(50 * time.Millisecond)
			}
			if token != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: p, Total: 100})
			}
		}
		return text("Tool with progress executed successfully"), nil
	})
	tool(s, "test_error_handling", "", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res := text("This tool intentionally returns an error for testing")
		res.IsError = true
		return res, nil
	})
	tool(s, "test_sampling", `{"type":"object","properties":{"prompt":{"type":"string"}},"required":["prompt"]}`,
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 100,
				Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: argument(req, "prompt")}}}})
			if err != nil {
				return nil, err
			}
			answer := ""
			if tc, ok := res.Content.(*mcp.TextContent); ok {
				answer = tc.Text
			}
			return text("LLM response: " + answer), nil
		})
	tool(s, "test_elicitation", `{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}`,
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return elicit(ctx, req, argument(req, "message"), `{"type":"object","properties":{
				"username":{"type":"string","description":"User's response"},
				"email":{"type":"string","description":"User's email address"}},"required":["username","email"]}`, "User response: ")
		})
	tool(s, "test_elicitation_sep1034_defaults", "", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return elicit(ctx, req, "Please review the defaults", `{"type":"object","properties":{
			"name":{"type":"string","default":"John Doe"},
			"age":{"type":"integer","default":30},
			"score":{"type":"number","default":95.5},
			"status":{"type":"string","enum":["active","inactive","pending"],"default":"active"},
			"verified":{"type":"boolean","default":true}}}`, "Elicitation completed: ")
	})
	tool(s, "test_elicitation_sep1330_enums", "", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return elicit(ctx, req, "Please choose", `{"type":"object","properties":{
			"untitledSingle":{"type":"string","enum":["option1","option2","option3"]},
			"titledSingle":{"type":"string","oneOf":[{"const":"value1","title":"First Option"},{"const":"value2","title":"Second Option"},{"const":"value3","title":"Third Option"}]},
			"legacyEnum":{"type":"string","enum":["opt1","opt2","opt3"],"enumNames":["Option One","Option Two","Option Three"]},
			"untitledMulti":{"type":"array","items":{"type":"string","enum":["option1","option2","option3"]}},
			"titledMulti":{"type":"array","items":{"anyOf":[{"const":"value1","title":"First Choice"},{"const":"value2","title":"Second Choice"},{"const":"value3","title":"Third Choice"}]}}}}`, "Elicitation completed: ")
	})
	tool(s, "json_schema_2020_12_tool", `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
		"$defs":{"address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},
		"properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"}},"additionalProperties":false}`,
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("ok"), nil })
	tool(s, "test_reconnection", "", func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if req.Extra != nil && req.Extra.CloseSSEStream != nil {
			req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: 10 * time.Millisecond})
		}
		time.Sleep(100 * time.Millisecond)
		return text("Reconnection test completed"), nil
	})
}

// elicit asks the client with message and the requested schema, and
// words its answer after prefix.
func elicit(ctx context.Context, req *mcp.CallToolRequest, message, schema, prefix string) (*mcp.CallToolResult, error) {
	res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: message, RequestedSchema: json.RawMessage(schema)})
	if err != nil {
		return nil, err
	}
	content, _ := json.Marshal(res.Content)
	return text(fmt.Sprintf("%saction=%s, content=%s", prefix, res.Action, content)), nil
}

func addResources(s *mcp.Server) {
	resource := func(uri, mime string, contents *mcp.ResourceContents) {
		s.AddResource(&mcp.Resource{URI: uri, Name: strings.TrimPrefix(uri, "test://"), Description: "conformance resource " + uri, MIMEType: mime},
			func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{contents}}, nil
			})
	}
	resource("test://static-text", "text/plain", &mcp.ResourceContents{URI: "test://static-text", MIMEType: "text/plain", Text: "This is the content of the static text resource."})
	resource("test://static-binary", "image/png", &mcp.ResourceContents{URI: "test://static-binary", MIMEType: "image/png", Blob: pngPixel})
	resource("test://watched-resource", "text/plain", &mcp.ResourceContents{URI: "test://watched-resource", MIMEType: "text/plain", Text: "watched"})
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "test://template/{id}/data", Name: "template", Description: "conformance resource template", MIMEType: "application/json"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			id := strings.TrimSuffix(strings.TrimPrefix(req.Params.URI, "test://template/"), "/data")
			data, _ := json.Marshal(map[string]any{"id": id, "templateTest": true, "data": "Data for ID: " + id})
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: string(data)}}}, nil
		})
}

func addPrompts(s *mcp.Server) {
	user := func(c mcp.Content) *mcp.PromptMessage { return &mcp.PromptMessage{Role: "user", Content: c} }
	prompt := func(name string, args []*mcp.PromptArgument, h func(map[string]string) []*mcp.PromptMessage) {
		s.AddPrompt(&mcp.Prompt{Name: name, Description: "conformance prompt " + name, Arguments: args},
			func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{Messages: h(req.Params.Arguments)}, nil
			})
	}
	prompt("test_simple_prompt", nil, func(map[string]string) []*mcp.PromptMessage {
		return []*mcp.PromptMessage{user(&mcp.TextContent{Text: "This is a simple prompt for testing."})}
	})
	prompt("test_prompt_with_arguments", []*mcp.PromptArgument{{Name: "arg1", Description: "First test argument", Required: true}, {Name: "arg2", Description: "Second test argument", Required: true}},
		func(a map[string]string) []*mcp.PromptMessage {
			return []*mcp.PromptMessage{user(&mcp.TextContent{Text: fmt.Sprintf("Prompt with arguments: arg1='%s', arg2='%s'", a["arg1"], a["arg2"])})}
		})
	prompt("test_prompt_with_embedded_resource", []*mcp.PromptArgument{{Name: "resourceUri", Description: "URI of the resource to embed", Required: true}},
		func(a map[string]string) []*mcp.PromptMessage {
			return []*mcp.PromptMessage{
				user(&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: a["resourceUri"], MIMEType: "text/plain", Text: "Embedded resource content for testing."}}),
				user(&mcp.TextContent{Text: "Please process the embedded resource above."}),
			}
		})
	prompt("test_prompt_with_image", nil, func(map[string]string) []*mcp.PromptMessage {
		return []*mcp.PromptMessage{
			user(&mcp.ImageContent{Data: pngPixel, MIMEType: "image/png"}),
			user(&mcp.TextContent{Text: "Please analyze the image above."}),
		}
	})
}
