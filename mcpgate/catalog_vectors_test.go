package mcpgate

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// TestCatalogVectors holds DecodeCatalog to the shared catalog vectors
// (test/vectors/catalogs.json), which the Python reader of the same format
// (sdk/python/gated/integrations) is held to as well.
func TestCatalogVectors(t *testing.T) {
	raw, err := os.ReadFile("../test/vectors/catalogs.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []struct {
			Name    string          `json:"name"`
			Data    string          `json:"data"`
			Valid   bool            `json:"valid"`
			Catalog json.RawMessage `json:"catalog"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) < 20 {
		t.Fatalf("%d cases", len(doc.Cases))
	}
	for _, tc := range doc.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			c, err := DecodeCatalog([]byte(tc.Data))
			if !tc.Valid {
				if err == nil {
					t.Fatalf("accepted, want an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			got, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(tc.Catalog, &w); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("got %s, want %s", got, tc.Catalog)
			}
		})
	}
}
