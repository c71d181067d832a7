package mcpgate

import (
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gated/gated"
)

func TestDecodeCatalog(t *testing.T) {
	for _, tc := range []struct {
		note, data string
		err        string // a part of the error; "" for none
	}{
		{note: "empty", data: ""},
		{note: "full YAML", data: `
reason_argument: why
blast_radius: cluster
tools:
  restart_service:
    action: host_restart_service
    class: write
    blast_radius: single_device
    target: {host: /host, service: /service}
    target_fixed: {tags: [production]}
    reason_argument: because
    reviewer: reviewer
`},
		{note: "JSON", data: `{"tools": {"drop_table": {"class": "destructive", "target": {"db": "/database"}}}}`},
		{note: "unknown field", data: "tools:\n  a: {klass: read}\n", err: "field klass not found"},
		{note: "unknown top-level field", data: "tool: {}\n", err: "field tool not found"},
		{note: "bad class", data: "tools:\n  a: {class: admin}\n", err: `tools["a"].class "admin"`},
		{note: "bad action", data: "tools:\n  a: {action: a.b}\n", err: `tools["a"].action "a.b"`},
		{note: "bad blast radius", data: "blast_radius: planet\n", err: `blast_radius "planet"`},
		{note: "bad tool blast radius", data: "tools:\n  a: {blast_radius: planet}\n", err: `tools["a"].blast_radius "planet"`},
		{note: "pointer without slash", data: "tools:\n  a: {target: {host: host}}\n", err: `tools["a"].target["host"]`},
		{note: "bad pointer escape", data: "tools:\n  a: {target: {host: /h~2}}\n", err: "~ must be followed by 0 or 1"},
		{note: "member fixed and mapped", data: "tools:\n  a: {target: {host: /h}, target_fixed: {host: x}}\n", err: `member "host" is both`},
		{note: "target_fixed with a non-string key", data: "tools:\n  a: {target_fixed: {m: {1: x}}}\n", err: "target_fixed"},
		{note: "blank reason argument", data: "reason_argument: \" \"\n", err: "reason_argument"},
		{note: "bad reviewer", data: "tools:\n  a: {reviewer: Bad Name}\n", err: "reviewer"},
		{note: "duplicate key", data: "tools:\n  a: {class: read}\n  a: {class: write}\n", err: "already defined"},
		{note: "two documents", data: "tools: {}\n---\ntools: {}\n", err: "more than one YAML document"},
		{note: "not a mapping", data: "[1, 2]\n", err: "cannot unmarshal"},
		{note: "oversize", data: strings.Repeat("#", MaxCatalogSize+1), err: "more than"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			c, err := DecodeCatalog([]byte(tc.data))
			if tc.err == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if c == nil {
					t.Fatal("nil catalog")
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidCatalog) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got error %v, want ErrInvalidCatalog mentioning %q", err, tc.err)
			}
		})
	}
}

func TestActionName(t *testing.T) {
	long := strings.Repeat("x", 200)
	for _, tc := range []struct{ note, tool, want string }{
		{"a token already", "restart_service", "restart_service"},
		{"dots and slashes", "db.drop/table", "db_drop_table"},
		{"spaces and unicode", "drop täble", "drop_t__ble"},
		{"empty", "", "_"},
		{"exactly 128", strings.Repeat("a", 128), strings.Repeat("a", 128)},
	} {
		t.Run(tc.note, func(t *testing.T) {
			if got := ActionName(tc.tool); got != tc.want {
				t.Errorf("ActionName(%q) = %q, want %q", tc.tool, got, tc.want)
			}
		})
	}
	t.Run("long names stay apart", func(t *testing.T) {
		a, b := ActionName(long+"a"), ActionName(long+"b")
		if a == b || !gated.ValidAction(a) || !gated.ValidAction(b) || len(a) != 128 {
			t.Errorf("ActionName of two long names: %q and %q", a, b)
		}
	})
}

func TestClassOf(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		note string
		a    *mcp.ToolAnnotations
		want gated.Class
	}{
		{"no annotations", nil, gated.ClassWrite},
		{"read-only", &mcp.ToolAnnotations{ReadOnlyHint: true}, gated.ClassRead},
		{"read-only wins over destructive", &mcp.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &yes}, gated.ClassRead},
		{"destructive", &mcp.ToolAnnotations{DestructiveHint: &yes}, gated.ClassDestructive},
		{"not destructive", &mcp.ToolAnnotations{DestructiveHint: &no}, gated.ClassWrite},
		{"destructive unset", &mcp.ToolAnnotations{IdempotentHint: true}, gated.ClassWrite},
	} {
		t.Run(tc.note, func(t *testing.T) {
			if got := ClassOf(tc.a); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func FuzzDecodeCatalog(f *testing.F) {
	for _, seed := range []string{
		"", "tools: {}\n", "reason_argument: why\nblast_radius: cluster\n",
		"tools:\n  a: {action: b, class: read, target: {h: /h/0}, target_fixed: {t: [1]}}\n",
		`{"tools": {"a": {"class": "destructive"}}}`, "tools:\n  a: {target: {h: /a~1b~0}}\n",
		"tools:\n  a: {labels: [secret, egress]}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCatalog(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidCatalog) {
				t.Fatalf("error %v does not wrap ErrInvalidCatalog", err)
			}
			return
		}
		// What the decoder accepts is usable: valid tokens and classes,
		// pointers that parse.
		for name, r := range c.Tools {
			if r.Action != "" && !gated.ValidAction(r.Action) {
				t.Fatalf("tool %q: accepted action %q", name, r.Action)
			}
			switch r.Class {
			case "", gated.ClassRead, gated.ClassWrite, gated.ClassDestructive:
			default:
				t.Fatalf("tool %q: accepted class %q", name, r.Class)
			}
			for _, p := range r.Target {
				if _, err := parsePointer(p); err != nil {
					t.Fatalf("tool %q: accepted pointer %q: %v", name, p, err)
				}
			}
			if len(r.Labels) > gated.MaxLabels {
				t.Fatalf("tool %q: accepted %d labels", name, len(r.Labels))
			}
			for _, l := range r.Labels {
				if !gated.ValidLabel(l) {
					t.Fatalf("tool %q: accepted label %q", name, l)
				}
			}
			m := MappingOf(&mcp.Tool{Name: name}, c)
			if !gated.ValidAction(m.Action) {
				t.Fatalf("tool %q maps onto action %q", name, m.Action)
			}
		}
	})
}
