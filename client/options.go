package client

import "time"

// AcquireOption configures Acquire.
type AcquireOption func(*acquireOptions)

type acquireOptions struct {
	ttl       time.Duration
	scope     string
	holder    string
	wait      bool
	requestID string
}

// DefaultTTL is the lease ttl when WithTTL is not given.
const DefaultTTL = 10 * time.Second

// WithTTL sets the lease's time to live (the cluster bounds it).
func WithTTL(d time.Duration) AcquireOption { return func(o *acquireOptions) { o.ttl = d } }

// WithScope draws the token from an explicit fencing scope shared with
// other resources (default: the resource name).
func WithScope(scope string) AcquireOption { return func(o *acquireOptions) { o.scope = scope } }

// WithHolder labels the lease for humans and logs; it is no authority.
func WithHolder(holder string) AcquireOption { return func(o *acquireOptions) { o.holder = holder } }

// WithWait queues the caller (first come, first served per resource)
// until the resource is free or ctx ends, instead of failing with ErrHeld.
func WithWait() AcquireOption { return func(o *acquireOptions) { o.wait = true } }

// WithRequestID sets the idempotency key (default: random per Acquire
// call, reused by the call's own retries). Reuse it to retry an Acquire
// that ended in ErrIndeterminate: at most one lease results.
func WithRequestID(id string) AcquireOption { return func(o *acquireOptions) { o.requestID = id } }

// WatchOption configures Watch.
type WatchOption func(*watchOptions)

type watchOptions struct {
	prefix bool
	after  *Position
}

// WithPrefix watches every resource whose name starts with the key.
func WithPrefix() WatchOption { return func(o *watchOptions) { o.prefix = true } }

// WithAfter resumes strictly after p (from an earlier Event.Position).
func WithAfter(p Position) WatchOption { return func(o *watchOptions) { o.after = &p } }
