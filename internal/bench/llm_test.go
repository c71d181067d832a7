package bench

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/openai"
)

// TestScriptedModelSpeaksOpenAI asks the scripted model through
// langchaingo's OpenAI client, the one the llm reviewer uses: the answer
// arrives after the latency and is the scripted approval.
func TestScriptedModelSpeaksOpenAI(t *testing.T) {
	s, err := ServeLLM("127.0.0.1:0", 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	model, err := openai.New(openai.WithBaseURL(s.BaseURL()), openai.WithToken("unused"), openai.WithModel("bench"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := model.GenerateContent(t.Context(), []llms.MessageContent{
		llms.TextParts(llms.ChatMessageTypeSystem, "review"),
		llms.TextParts(llms.ChatMessageTypeHuman, "restart nginx"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Errorf("answered in %s, before the latency", took)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Content != ScriptedAnswer {
		t.Fatalf("choices = %+v", resp.Choices)
	}
	if n, bad := s.Calls(); n != 1 || bad != 0 {
		t.Errorf("calls %d, bad %d", n, bad)
	}
	if got := s.Arrivals(); got != 0 {
		t.Errorf("one call arrived over %s, want 0", got)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := model.GenerateContent(t.Context(), []llms.MessageContent{llms.TextParts(llms.ChatMessageTypeHuman, "again")}); err != nil {
		t.Fatal(err)
	}
	if got := s.Arrivals(); got < 20*time.Millisecond || got > time.Minute {
		t.Errorf("two calls 20ms+ apart arrived over %s", got)
	}
	// The answer as it goes on the wire: the model echoed, a fresh id.
	r, err := http.Post(s.BaseURL()+"/chat/completions", "application/json",
		strings.NewReader(`{"model":"m\"1","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		ID, Object, Model string
		Created           int64
		Choices           []struct {
			Message struct{ Role, Content string }
		}
		Usage struct {
			Total int `json:"total_tokens"`
		}
	}
	err = json.NewDecoder(r.Body).Decode(&answer)
	r.Body.Close()
	if err != nil || answer.ID != "chatcmpl-bench-3" || answer.Object != "chat.completion" || answer.Model != `m"1` ||
		answer.Created < start.Unix() || len(answer.Choices) != 1 || answer.Choices[0].Message.Content != ScriptedAnswer ||
		answer.Choices[0].Message.Role != "assistant" || answer.Usage.Total != 2 {
		t.Fatalf("answer %+v, %v", answer, err)
	}
	r, err = http.Post(s.BaseURL()+"/chat/completions", "application/json", strings.NewReader("{"))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if n, bad := s.Calls(); r.StatusCode != http.StatusBadRequest || bad != 1 || n != 3 {
		t.Errorf("a broken request got %d (bad %d)", r.StatusCode, bad)
	}
}
