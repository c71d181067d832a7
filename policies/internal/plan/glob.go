package plan

import (
	"unicode/utf8"

	"github.com/gobwas/glob"
	"github.com/open-policy-agent/opa/v1/ast"
)

// glob.match is the built-in a decision calls most: every action pattern
// of the SOPs, the routes and the tool denylists is matched with it. OPA's
// built-in builds a string key and a delimiter slice for each call and
// looks the compiled pattern up in a global cache under a lock, which the
// evaluations of all the workers share. The machine keeps the patterns it
// has compiled instead, keyed without allocating. It takes the common
// operands only: a string pattern, null or an array of up to four
// one-character strings, a string to match, and a pattern that compiles.
// Anything else goes to OPA's built-in, which reports errors in its own
// words; FuzzGlobMatch holds the two equal.

// globKey names a compiled pattern: the pattern and the delimiters it was
// compiled with.
type globKey struct {
	pattern string
	n       int
	delims  [4]rune
}

// maxGlobs bounds the patterns a machine keeps; past it the machine
// starts over.
const maxGlobs = 512

// globMatch returns glob.match(args[0], args[1], args[2]); ok is false for
// operands it leaves to OPA's built-in.
func (m *machine) globMatch(args []*ast.Term) (_ *ast.Term, ok bool) {
	pattern, ok := args[0].Value.(ast.String)
	if !ok {
		return nil, false
	}
	match, ok := args[2].Value.(ast.String)
	if !ok {
		return nil, false
	}
	key := globKey{pattern: string(pattern)}
	switch d := args[1].Value.(type) {
	case ast.Null:
	case *ast.Array:
		if d.Len() > len(key.delims) {
			return nil, false
		}
		for i := range d.Len() {
			s, ok := d.Elem(i).Value.(ast.String)
			if !ok || utf8.RuneCountInString(string(s)) != 1 {
				return nil, false
			}
			key.delims[i], _ = utf8.DecodeRuneInString(string(s))
		}
		key.n = d.Len()
		if key.n == 0 {
			// As OPA's built-in reads an empty array.
			key.delims[0], key.n = '.', 1
		}
	default:
		return nil, false
	}
	g, ok := m.globs[key]
	if !ok {
		var err error
		if g, err = key.compile(); err != nil {
			return nil, false
		}
		if m.globs == nil || len(m.globs) >= maxGlobs {
			m.globs = make(map[globKey]*glob.Pattern)
		}
		m.globs[key] = g
	}
	return ast.InternedTerm(g.Match(string(match))), true
}

// compile compiles the pattern k names. It takes k by value: the
// delimiters it hands glob.Compile leave the function, and a key that
// stays on the caller's stack keeps a lookup free of allocation.
func (k globKey) compile() (*glob.Pattern, error) {
	return glob.Compile(k.pattern, k.delims[:k.n]...)
}
