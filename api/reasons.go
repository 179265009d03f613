package api

// Reasons of the google.rpc.ErrorInfo details the service attaches to some
// statuses (hand-written, beside the generated code: the server's error
// table in cluster/errors.go and the client's inverse in client/errors.go
// share them).
const (
	// ErrorDomain is the domain of every ErrorInfo this service sends.
	ErrorDomain = "leasefence.v1"

	// ReasonLeaseEnded marks a NotFound answering an Acquire whose
	// request id replays a grant that has since ended (released, or past
	// its expires_at). Metadata: request_id, lease_id (hex), resource,
	// scope, token. The caller holds nothing: it must treat the lease as
	// lost and Acquire again with a new request id.
	ReasonLeaseEnded = "LEASE_ENDED"

	// ReasonIndeterminate marks an Unavailable whose call may or may not
	// have taken effect: it reached Raft, or a leader that stopped
	// answering. Retrying with the same request id is safe.
	ReasonIndeterminate = "INDETERMINATE"
	// ReasonOverloaded marks a ResourceExhausted from a leader whose
	// admission queue for client commands is full: nothing was proposed,
	// so the call may be sent again as it is. A google.rpc.RetryInfo
	// detail says how long to wait first (KeepAliveResponse.retry_after on
	// a keep-alive stream). Renewals and releases of held leases have a
	// larger budget than new grants, so grants are refused first.
	ReasonOverloaded = "OVERLOADED"

	// MetaRequestID is the ErrorInfo metadata key of the request id to
	// retry with (absent when the call carried none).
	MetaRequestID = "request_id"
)

// HeaderKeepAliveHeartbeats is the request metadata key a client sets
// (to "1") when it opens a KeepAlive stream to be sent heartbeats: empty
// answers (seq 0) while its renewals are slow to commit. A client that
// does not set it gets none: one that took them for answers would never
// count renewals that failed in a row.
const HeaderKeepAliveHeartbeats = "leasefence-keepalive-heartbeats"
