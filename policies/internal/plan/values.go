package plan

import (
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
)

// dot looks key up in v: an object's value, an array's element, a set's
// member; nil when there is none.
func dot(v ast.Value, key *ast.Term) *ast.Term {
	switch c := v.(type) {
	case ast.Object:
		return c.Get(key)
	case *ast.Array:
		n, ok := key.Value.(ast.Number)
		if !ok {
			return nil
		}
		i, ok := n.Int()
		if !ok || i < 0 || i >= c.Len() {
			return nil
		}
		return c.Elem(i)
	case ast.Set:
		if c.Contains(key) {
			return key
		}
	}
	return nil
}

func length(v ast.Value) (int, bool) {
	switch c := v.(type) {
	case *ast.Array:
		return c.Len(), true
	case ast.Object:
		return c.Len(), true
	case ast.Set:
		return c.Len(), true
	case ast.String:
		return utf8.RuneCountInString(string(c)), true
	}
	return 0, false
}

func isArray(v ast.Value) bool { _, ok := v.(*ast.Array); return ok }

func isObject(v ast.Value) bool { _, ok := v.(ast.Object); return ok }

func isSet(v ast.Value) bool { _, ok := v.(ast.Set); return ok }
