package aos

import (
	"encoding/json"
	"testing"
)

// BenchmarkParseStep measures the endpoint's decoding path (SplitBody then ParseStep) on
// each example request.
func BenchmarkParseStep(b *testing.B) {
	for _, name := range []string{"toolCallRequest", "message", "toolCallResult", "MCP", "A2A", "ping"} {
		body := example(b, name)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				msgs, _, e := SplitBody(body)
				if e != nil {
					b.Fatal(e)
				}
				if _, e := ParseStep(msgs[0]); e != nil {
					b.Fatal(e)
				}
			}
		})
	}
}

// BenchmarkEncodingJSON is the reference: encoding/json decoding the same tool call into
// equivalent structs without validation or paths.
func BenchmarkEncodingJSON(b *testing.B) {
	type agent struct {
		Name, ID, Description, Instructions, URL, Version string
		Provider                                          AgentProvider
		Model                                             *Model
		Tools                                             []ToolDefinition
		MCPServers                                        []MCPServer
		Resources                                         []Resource
		Organization                                      *Organization
		Metadata                                          map[string]any
	}
	var req struct {
		JSONRPC string
		ID      json.RawMessage
		Method  string
		Params  struct {
			Context struct {
				Agent                     agent
				Session                   Session
				TurnID, StepID, Timestamp string
				User                      *User
			}
			ToolCallRequest ToolCallRequest
			Reasoning       string
		}
	}
	body := example(b, "toolCallRequest")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := json.Unmarshal(body, &req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkText(b *testing.B) {
	s := parse(b, example(b, "toolCallRequest"))
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Text()
	}
}
