package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// opaClient posts decisions to OPA's data API over kept-alive
// connections, one per concurrent caller.
type opaClient struct {
	url  string // the decision endpoint
	http *http.Client
}

// newOPAClient returns a client of the OPA server at base that keeps up
// to conns connections open.
func newOPAClient(base string, conns int) *opaClient {
	return &opaClient{
		url: base + decisionPath,
		http: &http.Client{
			Transport: &http.Transport{
				MaxIdleConns:        conns,
				MaxIdleConnsPerHost: conns,
				IdleConnTimeout:     time.Minute,
				DisableCompression:  true,
			},
			Timeout: 30 * time.Second,
		},
	}
}

// close drops the client's idle connections, so that the next
// concurrency level starts on fresh ones.
func (c *opaClient) close() { c.http.CloseIdleConnections() }

// post sends body and reads the response into buf, which it returns. A
// status other than 200 is an error carrying the start of OPA's answer.
func (c *opaClient) post(ctx context.Context, body []byte, buf *bytes.Buffer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	buf.Reset()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return fmt.Errorf("reading OPA's response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("OPA answered %s: %.300s", resp.Status, bytes.TrimSpace(buf.Bytes()))
	}
	return nil
}

// outcome decides body and reads only what the load loop checks, as a
// client that acts on the decision would.
func (c *opaClient) outcome(ctx context.Context, body []byte, buf *bytes.Buffer) (outcome, error) {
	if err := c.post(ctx, body, buf); err != nil {
		return outcome{}, err
	}
	var resp struct {
		Result *struct {
			Deny   []json.RawMessage `json:"deny"`
			Review struct {
				Required bool `json:"required"`
			} `json:"review"`
		} `json:"result"`
	}
	if err := json.Unmarshal(buf.Bytes(), &resp); err != nil {
		return outcome{}, fmt.Errorf("decoding OPA's response: %w", err)
	}
	if resp.Result == nil {
		return outcome{}, errUndefined
	}
	return outcome{denied: len(resp.Result.Deny) > 0, reviewed: resp.Result.Review.Required}, nil
}

// decision decides body and reads the whole decision, for the comparison
// with gated.
func (c *opaClient) decision(ctx context.Context, body []byte) (*opaDecision, error) {
	var buf bytes.Buffer
	if err := c.post(ctx, body, &buf); err != nil {
		return nil, err
	}
	var resp struct {
		Result *opaDecision `json:"result"`
	}
	if err := json.Unmarshal(buf.Bytes(), &resp); err != nil {
		return nil, fmt.Errorf("decoding OPA's response: %w", err)
	}
	if resp.Result == nil {
		return nil, errUndefined
	}
	return resp.Result, nil
}

// health waits until OPA's /health answers 200 or ctx ends.
func (c *opaClient) health(ctx context.Context, base string) error {
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
		if err != nil {
			return err
		}
		resp, err := c.http.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/health answered %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for OPA at %s: %w (last: %v)", base, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
