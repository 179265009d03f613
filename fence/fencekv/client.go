package fencekv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencehttp"
)

// Errors of Client.
var (
	// ErrIndeterminate is returned when a write was sent but no answer came
	// back (connection lost, timeout): it may or may not have been applied.
	// A checker must record it as unknown, never as failed.
	ErrIndeterminate = errors.New("fencekv: outcome unknown")
	// ErrNotFound is returned by Get for a key without a value.
	ErrNotFound = errors.New("fencekv: not found")
)

// Client talks to a fencedkv server. The zero value is not usable: set
// BaseURL. Safe for concurrent use.
type Client struct {
	// BaseURL is the server's root, e.g. "http://127.0.0.1:7100".
	BaseURL string
	// HTTP sends the requests; nil means http.DefaultClient.
	HTTP *http.Client
}

// Put sets key to value under tok. A refused token returns a
// *fence.StaleTokenError (or a fence.ErrMalformedToken/ErrNoToken error);
// no answer returns an error wrapping ErrIndeterminate.
func (c *Client) Put(ctx context.Context, key string, tok fence.Token, value []byte) (AuditRecord, error) {
	return c.write(ctx, http.MethodPut, "/kv/", key, tok, value)
}

// Append appends value to key's value under tok; errors as for Put.
func (c *Client) Append(ctx context.Context, key string, tok fence.Token, value []byte) (AuditRecord, error) {
	return c.write(ctx, http.MethodPost, "/append/", key, tok, value)
}

// PutUnchecked sends a put with the Fencing-Token header set to header
// verbatim (omitted when empty): for tests of the refusals.
func (c *Client) PutUnchecked(ctx context.Context, key, header string, value []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.url("/kv/", key), bytes.NewReader(value))
	if err != nil {
		return nil, err
	}
	if header != "" {
		req.Header.Set(fencehttp.Header, header)
	}
	return c.http().Do(req)
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) url(prefix, key string) string {
	return strings.TrimRight(c.BaseURL, "/") + prefix + escapeKey(key)
}

// escapeKey escapes each segment of a key, keeping its slashes.
func escapeKey(key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

func (c *Client) write(ctx context.Context, method, prefix, key string, tok fence.Token, value []byte) (AuditRecord, error) {
	var rec AuditRecord
	req, err := http.NewRequestWithContext(ctx, method, c.url(prefix, key), bytes.NewReader(value))
	if err != nil {
		return rec, err
	}
	fencehttp.SetToken(req.Header, tok)
	resp, err := c.http().Do(req)
	if err != nil {
		return rec, fmt.Errorf("%w: %v", ErrIndeterminate, err)
	}
	defer resp.Body.Close()
	if ferr := fencehttp.ResponseError(resp); ferr != nil {
		return rec, ferr
	}
	if resp.StatusCode != http.StatusOK {
		return rec, statusError(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(&rec); err != nil {
		return rec, fmt.Errorf("%w: reading the answer: %v", ErrIndeterminate, err)
	}
	return rec, nil
}

func statusError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return fmt.Errorf("fencekv: %s: %s", resp.Status, strings.TrimSpace(string(b)))
}

// Get returns key's value and the highest token accepted in its scope;
// ErrNotFound if it has no value.
func (c *Client) Get(ctx context.Context, key string) (value []byte, highest uint64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url("/kv/", key), nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	highest, _ = strconv.ParseUint(resp.Header.Get(HighestHeader), 10, 64)
	switch resp.StatusCode {
	case http.StatusOK:
		value, err = io.ReadAll(resp.Body)
		return value, highest, err
	case http.StatusNotFound:
		return nil, highest, ErrNotFound
	}
	return nil, 0, statusError(resp)
}

// Highest returns the highest token accepted in scope.
func (c *Client) Highest(ctx context.Context, scope string) (uint64, error) {
	var info ScopeInfo
	err := c.getJSON(ctx, c.url("/scopes/", scope), &info)
	return info.Highest, err
}

// Audit returns up to limit audit records with seq > after, in order.
func (c *Client) Audit(ctx context.Context, after uint64, limit int) (AuditPage, error) {
	var page AuditPage
	u := fmt.Sprintf("%s/audit?after=%d&limit=%d", strings.TrimRight(c.BaseURL, "/"), after, limit)
	err := c.getJSON(ctx, u, &page)
	return page, err
}

// AuditAll returns the whole audit log.
func (c *Client) AuditAll(ctx context.Context) ([]AuditRecord, error) {
	var all []AuditRecord
	var after uint64
	for {
		page, err := c.Audit(ctx, after, MaxAuditPage)
		if err != nil {
			return all, err
		}
		all = append(all, page.Records...)
		if len(page.Records) < MaxAuditPage {
			return all, nil
		}
		after = page.Next
	}
}

func (c *Client) getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return statusError(resp)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
