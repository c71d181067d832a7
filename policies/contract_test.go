package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// jsonPaths lists the key path of every JSON field of the struct type t,
// nested structs and lists of structs included: "run.prior_reviews[].round".
func jsonPaths(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		path := prefix + name
		out = append(out, path)
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]():
			out = append(out, jsonPaths(ft, path+".")...)
		case ft.Kind() == reflect.Slice && elemStruct(ft.Elem()):
			out = append(out, jsonPaths(ft.Elem(), path+"[].")...)
		}
	}
	return out
}

func elemStruct(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && t != reflect.TypeFor[time.Time]()
}

// fill sets every field of v, recursively, to a value that is not its
// zero value: strings "x", numbers 7, booleans true, one element in every
// list and one key in every map.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		m.SetMapIndex(reflect.ValueOf("k"), reflect.ValueOf(any("v")))
		v.Set(m)
	}
}

// lookup follows a key path in an input value; "[]" steps into the first
// element of a list.
func lookup(v ast.Value, path string) (ast.Value, bool) {
	for key := range strings.SplitSeq(path, ".") {
		list := strings.HasSuffix(key, "[]")
		key = strings.TrimSuffix(key, "[]")
		obj, ok := v.(ast.Object)
		if !ok {
			return nil, false
		}
		t := obj.Get(ast.StringTerm(key))
		if t == nil {
			return nil, false
		}
		v = t.Value
		if list {
			arr, ok := v.(*ast.Array)
			if !ok || arr.Len() == 0 {
				return nil, false
			}
			v = arr.Elem(0).Value
		}
	}
	return v, true
}

// TestInputCarriesTheWireContract checks, field by field, that the policy
// input holds every JSON field of the proposal and of the persona, with
// the value the JSON of a fully set struct has: a field added to the
// wire contract and forgotten in the input fails here.
func TestInputCarriesTheWireContract(t *testing.T) {
	var p gated.Proposal
	fill(reflect.ValueOf(&p).Elem())
	var persona engine.Persona
	fill(reflect.ValueOf(&persona).Elem())
	in := InputValue(engine.PolicyInput{Proposal: &p, Persona: &persona, Now: time.Now()})
	for _, tc := range []struct {
		name string
		typ  reflect.Type
		of   any
	}{
		{"proposal", reflect.TypeFor[gated.Proposal](), &p},
		{"persona", reflect.TypeFor[engine.Persona](), &persona},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(tc.of)
			if err != nil {
				t.Fatal(err)
			}
			want := mustValue(t, raw)
			for _, path := range jsonPaths(tc.typ, "") {
				got, ok := lookup(in, tc.name+"."+path)
				if !ok {
					t.Errorf("input.%s.%s is missing", tc.name, path)
					continue
				}
				wantV, ok := lookup(want, path)
				if !ok {
					t.Fatalf("the JSON of a fully set %s has no %s", tc.name, path)
				}
				if got.Compare(wantV) != 0 {
					t.Errorf("input.%s.%s is %v, the JSON says %v", tc.name, path, got, wantV)
				}
			}
		})
	}
}

// TestDecoderKnowsTheWireContract checks that the decoder's strict-key
// schema accepts every JSON field of the proposal: a proposal with every
// field set may fail validation on its values, never on its keys.
func TestDecoderKnowsTheWireContract(t *testing.T) {
	var p gated.Proposal
	fill(reflect.ValueOf(&p).Elem())
	raw, err := json.Marshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range jsonPaths(reflect.TypeFor[gated.Proposal](), "") {
		if _, ok := lookup(mustValue(t, raw), path); !ok {
			t.Fatalf("the JSON of a fully set proposal has no %s", path)
		}
	}
	_, err = gated.DecodeProposal(raw, p.Tenant, p.Action, gated.Limits{})
	if fe, ok := errors.AsType[*gated.FieldError](err); ok && strings.Contains(fe.Error(), "is not a field") {
		t.Errorf("the decoder refuses a field of gated.Proposal: %v", err)
	}
}

func mustValue(t *testing.T, raw []byte) ast.Value {
	t.Helper()
	v, err := ast.ValueFromReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return v
}
