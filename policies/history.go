package policies

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/strictjson"
)

// DecodeHistory decodes the history a policy is evaluated with, read from
// the file name, strictly: a JSON array of verdicts, no field the verdict
// schema lacks, every decided_at set.
func DecodeHistory(name string, raw []byte) ([]gated.Verdict, error) {
	var items []json.RawMessage
	if err := strictJSON(raw, &items); err != nil {
		return nil, fmt.Errorf("%s: want a JSON array of verdicts: %v", name, err)
	}
	history := make([]gated.Verdict, len(items))
	for i, item := range items {
		if err := strictJSON(item, &history[i]); err != nil {
			return nil, fmt.Errorf("%s: verdict [%d]: %v", name, i, err)
		}
		if history[i].DecidedAt.IsZero() {
			return nil, fmt.Errorf("%s: verdict [%d]: decided_at is missing: want an RFC 3339 time", name, i)
		}
	}
	return history, nil
}

// strictJSON decodes one JSON value into v, refusing unknown fields and
// trailing data.
func strictJSON(raw []byte, v any) error {
	err := strictjson.Decode(raw, v)
	if typ, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && typ.Field != "" {
		return fmt.Errorf("field %s must not be %s", typ.Field, typ.Value)
	}
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}
