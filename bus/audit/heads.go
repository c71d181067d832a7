package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/gated/gated/internal/digest"
)

// Head is the last record of a tenant's chain. Kept outside NATS,
// heads are anchors: a later Verify given them detects the chain cut
// short or rewritten after them, which the chain alone cannot show.
type Head struct {
	Tenant string `json:"tenant"`
	N      uint64 `json:"n"`
	Hash   string `json:"hash"`
	Seq    uint64 `json:"seq,omitempty"`
}

// ParseHeads reads anchors: JSON lines (or one JSON array) of
// Head, as `gated audit verify --json` prints them.
func ParseHeads(data []byte) ([]Head, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, nil
	}
	if data[0] == '[' {
		var heads []Head
		if err := json.Unmarshal(data, &heads); err != nil {
			return nil, fmt.Errorf("reading anchors: %w", err)
		}
		return checkHeads(heads)
	}
	var heads []Head
	dec := json.NewDecoder(bytes.NewReader(data))
	// Decode until EOF, not while dec.More(): More reports false at a
	// stray ']' or '}', which would end the anchors there silently, and an
	// anchors file that reads as fewer anchors than it holds defeats them.
	for line := 1; ; line++ {
		var h struct {
			Head
			Type string `json:"type"`
		}
		err := dec.Decode(&h)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading anchors: item %d: %w", line, err)
		}
		if h.Type == "" || h.Type == "head" {
			heads = append(heads, h.Head)
		}
	}
	return checkHeads(heads)
}

func checkHeads(heads []Head) ([]Head, error) {
	for i, h := range heads {
		if !validAuditTenant(h.Tenant) || h.N == 0 || !digest.ValidSHA256(h.Hash) {
			return nil, fmt.Errorf("reading anchors: item %d: want a tenant, n ≥ 1 and a hex SHA-256 hash", i+1)
		}
	}
	return heads, nil
}
