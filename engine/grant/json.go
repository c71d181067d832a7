package grant

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gated/gated/internal/jsonscan"
)

// maxDepth bounds the nesting of a JSON document read here, so that a
// hostile target or token cannot exhaust the stack.
const maxDepth = 64

// kind is the type of a JSON value as read by parseJSON.
type kind int

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

func (k kind) String() string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

// value is one JSON value. Numbers keep their text; objects keep their
// members in the order read, with duplicate names refused.
type value struct {
	kind    kind
	boolean bool
	text    string // a string's decoded text, or a number's literal
	items   []*value
	members []member
}

type member struct {
	name string
	val  *value
}

// get returns the member named name, or nil.
func (v *value) get(name string) *value {
	for _, m := range v.members {
		if m.name == name {
			return m.val
		}
	}
	return nil
}

// parseJSON reads exactly one JSON value (RFC 8259) strictly: valid UTF-8,
// no duplicate member names, no unpaired surrogate escapes, no trailing
// data, at most maxDepth levels. These are the I-JSON (RFC 7493) rules that
// RFC 8785 canonicalisation relies on.
func parseJSON(data []byte) (*value, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("JSON is not valid UTF-8")
	}
	p := &parser{data: data}
	p.space()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.pos != len(p.data) {
		return nil, fmt.Errorf("JSON has data after its value at byte %d", p.pos)
	}
	return v, nil
}

type parser struct {
	data []byte
	pos  int
}

func (p *parser) space() { p.pos = jsonscan.Space(p.data, p.pos) }

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("JSON at byte %d: %s", p.pos, fmt.Sprintf(format, args...))
}

func (p *parser) literal(word string) bool {
	end := jsonscan.Literal(p.data, p.pos, word)
	if end < 0 {
		return false
	}
	p.pos = end
	return true
}

func (p *parser) value(depth int) (*value, error) {
	if depth > maxDepth {
		return nil, p.errorf("nested deeper than %d levels", maxDepth)
	}
	if p.pos >= len(p.data) {
		return nil, p.errorf("unexpected end")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return &value{kind: kindString, text: s}, nil
	case c == 't' && p.literal("true"):
		return &value{kind: kindBool, boolean: true}, nil
	case c == 'f' && p.literal("false"):
		return &value{kind: kindBool}, nil
	case c == 'n' && p.literal("null"):
		return &value{kind: kindNull}, nil
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	default:
		return nil, p.errorf("unexpected character %q", rune(c))
	}
}

func (p *parser) object(depth int) (*value, error) {
	p.pos++ // {
	v := &value{kind: kindObject}
	seen := map[string]bool{}
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return v, nil
	}
	for {
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.errorf("want a member name")
		}
		name, err := p.str()
		if err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, p.errorf("duplicate member %q", name)
		}
		seen[name] = true
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.errorf("want ':' after member %q", name)
		}
		p.pos++
		p.space()
		val, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		v.members = append(v.members, member{name, val})
		p.space()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end in an object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return v, nil
		default:
			return nil, p.errorf("want ',' or '}' in an object")
		}
	}
}

func (p *parser) array(depth int) (*value, error) {
	p.pos++ // [
	v := &value{kind: kindArray}
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return v, nil
	}
	for {
		p.space()
		item, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		v.items = append(v.items, item)
		p.space()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end in an array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return v, nil
		default:
			return nil, p.errorf("want ',' or ']' in an array")
		}
	}
}

func (p *parser) str() (string, error) {
	p.pos++ // "
	var b strings.Builder
	for {
		if p.pos >= len(p.data) {
			return "", p.errorf("unterminated string")
		}
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return b.String(), nil
		case c < 0x20:
			return "", p.errorf("control character in a string")
		case c != '\\':
			b.WriteByte(c)
			p.pos++
			continue
		}
		p.pos++ // backslash
		if p.pos >= len(p.data) {
			return "", p.errorf("unterminated escape")
		}
		e := p.data[p.pos]
		p.pos++
		switch e {
		case '"', '\\', '/':
			b.WriteByte(e)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, err := p.hex4()
			if err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) {
				if r >= 0xdc00 || !p.literal(`\u`) {
					return "", p.errorf("unpaired surrogate \\u%04x", r)
				}
				lo, err := p.hex4()
				if err != nil {
					return "", err
				}
				if lo < 0xdc00 || lo > 0xdfff {
					return "", p.errorf("unpaired surrogate \\u%04x", r)
				}
				r = utf16.DecodeRune(r, lo)
			}
			b.WriteRune(r)
		default:
			return "", p.errorf("invalid escape \\%c", e)
		}
	}
}

func (p *parser) hex4() (rune, error) {
	if p.pos+4 > len(p.data) {
		return 0, p.errorf("short \\u escape")
	}
	n, err := strconv.ParseUint(string(p.data[p.pos:p.pos+4]), 16, 32)
	if err != nil {
		return 0, p.errorf("invalid \\u escape")
	}
	p.pos += 4
	return rune(n), nil
}

func (p *parser) number() (*value, error) {
	start := p.pos
	end := jsonscan.Number(p.data, start)
	if end >= 0 && end < len(p.data) && p.data[end] >= '0' && p.data[end] <= '9' {
		// Number stops after a lone 0; a digit after it is a leading zero.
		return nil, p.errorf("number with a leading zero")
	}
	if end < 0 {
		return nil, p.errorf("invalid number (want -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?)")
	}
	p.pos = end
	return &value{kind: kindNumber, text: string(p.data[start:end])}, nil
}

// integer reads v as an integer written without fraction or exponent that
// fits in an int64.
func (v *value) integer() (int64, bool) {
	if v == nil || v.kind != kindNumber || strings.ContainsAny(v.text, ".eE") {
		return 0, false
	}
	n, err := strconv.ParseInt(v.text, 10, 64)
	return n, err == nil
}
