// Package fencehttp carries fencing tokens over HTTP and enforces them in
// middleware.
//
// A token travels in one header, "Fencing-Token: <scope>=<token>" (see
// fence.FormatHeader). A fenced request without it gets 400 with error
// "missing_token", an unparsable one 400 with "malformed_token", a stale one
// 409 with "stale_token" and the scope and both tokens; every error body is
// JSON (ErrorBody).
//
// Server:
//
//	guard := fence.NewMemory(fence.AtLeast) // or a fencebolt guard
//	http.Handle("/jobs/", fencehttp.Handler(jobs, fencehttp.WithGuard(guard)))
//
// Client:
//
//	hc := &http.Client{Transport: &fencehttp.Transport{}}
//	req, _ := http.NewRequestWithContext(fence.NewContext(ctx, fence.TokenOf(lease)), "PUT", url, body)
//	resp, err := hc.Do(req)
//	if err == nil { err = fencehttp.ResponseError(resp) } // *fence.StaleTokenError on 409
package fencehttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/internal/recorded"
)

// Header is the request header that carries a token.
const Header = "Fencing-Token"

// Error codes of ErrorBody.Error.
const (
	CodeStaleToken     = "stale_token"
	CodeMissingToken   = "missing_token"
	CodeMalformedToken = "malformed_token"
)

// ErrorBody is the JSON body of a fence refusal.
type ErrorBody struct {
	// Error is one of the Code* constants.
	Error string `json:"error"`
	// Message is the human-readable error.
	Message string `json:"message"`
	// Scope, Presented and Highest are set for stale_token.
	Scope     string `json:"scope,omitempty"`
	Presented uint64 `json:"presented,omitempty"`
	Highest   uint64 `json:"highest,omitempty"`
}

// TokenFromRequest reads the Fencing-Token header. No header is
// fence.ErrNoToken; several, or an unusable value, wrap
// fence.ErrMalformedToken.
func TokenFromRequest(r *http.Request) (fence.Token, error) {
	vs := r.Header.Values(Header)
	switch len(vs) {
	case 0:
		return fence.Token{}, fence.ErrNoToken
	case 1:
		return fence.ParseHeader(vs[0])
	}
	return fence.Token{}, fmt.Errorf("%w: %d %s headers", fence.ErrMalformedToken, len(vs), Header)
}

// SetToken sets the Fencing-Token header of h to tok.
func SetToken(h http.Header, tok fence.Token) { h.Set(Header, fence.FormatHeader(tok)) }

// WriteError writes the response for a fence error (409 for stale, 400 for
// missing or malformed, JSON ErrorBody) and reports true; for any other
// error it writes nothing and reports false.
func WriteError(w http.ResponseWriter, err error) bool {
	body, code := errorBody(err)
	if code == 0 {
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(body)
	return true
}

func errorBody(err error) (ErrorBody, int) {
	var st *fence.StaleTokenError
	switch {
	case err == nil:
	case errors.As(err, &st):
		return ErrorBody{Error: CodeStaleToken, Message: err.Error(), Scope: st.Scope, Presented: st.Presented, Highest: st.Highest}, http.StatusConflict
	case errors.Is(err, fence.ErrNoToken):
		return ErrorBody{Error: CodeMissingToken, Message: fmt.Sprintf("%v: send %s: <scope>=<token>", err, Header)}, http.StatusBadRequest
	case errors.Is(err, fence.ErrMalformedToken):
		return ErrorBody{Error: CodeMalformedToken, Message: err.Error()}, http.StatusBadRequest
	}
	return ErrorBody{}, 0
}

// ResponseError returns the fence error a response stands for: a
// *fence.StaleTokenError for 409 stale_token, an error wrapping
// fence.ErrNoToken or fence.ErrMalformedToken for their 400s, nil for
// anything else. It reads the body only for those statuses and leaves it
// readable again.
func ResponseError(resp *http.Response) error {
	if resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusBadRequest {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	if err != nil {
		return nil
	}
	var body ErrorBody
	if json.Unmarshal(b, &body) != nil {
		return nil
	}
	switch {
	case body.Error == CodeStaleToken && resp.StatusCode == http.StatusConflict:
		return &fence.StaleTokenError{Scope: body.Scope, Presented: body.Presented, Highest: body.Highest}
	case body.Error == CodeMissingToken && resp.StatusCode == http.StatusBadRequest:
		return fmt.Errorf("%w (server: %s)", fence.ErrNoToken, body.Message)
	case body.Error == CodeMalformedToken && resp.StatusCode == http.StatusBadRequest:
		return fmt.Errorf("%w (server: %s)", fence.ErrMalformedToken, body.Message)
	}
	return nil
}

type options struct{ guard fence.Guard }

// Option configures Handler.
type Option func(*options)

// WithGuard makes Handler enforce tokens itself: next runs inside guard.Do,
// only for an admitted token, and the token is recorded whenever next ran,
// whatever it answered, and also when it panicked (the panic then goes on
// to net/http with the same value once the token is recorded, so
// http.ErrAbortHandler still aborts quietly): the middleware cannot tell
// whether next applied an effect before it failed, and an effect applied
// with an unrecorded token would let an older holder in after it. An
// httputil.ReverseProxy, say, panics after the upstream applied the
// request when copying the reply fails. (Under the strict rule a retry with
// the same token is then refused: acquire again.) The record is not atomic
// with next's effect; where that matters, use no guard here and a guard
// inside next's own transaction (fencebolt, fencesql). Without a guard
// Handler only requires a well-formed token and hands it to next
// (fence.FromContext); next may then answer a fence error with WriteError.
func WithGuard(g fence.Guard) Option { return func(o *options) { o.guard = g } }

// Handler requires a token on every request: missing or malformed → 400,
// stale → 409, each with an ErrorBody; otherwise next runs with the token
// in its context. Mount it on the routes that change the resource.
func Handler(next http.Handler, opts ...Option) http.Handler {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, err := TokenFromRequest(r)
		if err != nil {
			WriteError(w, err)
			return
		}
		r = r.WithContext(fence.NewContext(r.Context(), tok))
		if o.guard == nil {
			next.ServeHTTP(w, r)
			return
		}
		// Recorded whatever next answered, even if it panicked (see WithGuard).
		ran, err := recorded.Run(r.Context(), o.guard, tok, func(ctx context.Context) {
			next.ServeHTTP(w, r.WithContext(ctx))
		})
		switch {
		case err == nil:
		case ran: // next has answered; the record failed, nothing more to say
		case WriteError(w, err):
		default: // the request's context ended while waiting for the scope
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
}

// Transport is an http.RoundTripper that sets the Fencing-Token header from
// the request's context (fence.NewContext), or from Token when set.
// Requests with no token are sent unchanged. It does not read responses:
// use ResponseError.
type Transport struct {
	// Base sends the request; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Token, when set, chooses the token of a request instead of its
	// context; ok=false sends the request without one.
	Token func(*http.Request) (tok fence.Token, ok bool)
}

// RoundTrip implements http.RoundTripper. It clones a request before
// setting the header, as RoundTrippers must not modify their input.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	var tok fence.Token
	var ok bool
	if t.Token != nil {
		tok, ok = t.Token(r)
	} else {
		tok, ok = fence.FromContext(r.Context())
	}
	if ok {
		r = r.Clone(r.Context())
		SetToken(r.Header, tok)
	}
	return base.RoundTrip(r)
}
