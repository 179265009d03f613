package api

// The errdetails.ErrorInfo a node attaches to some statuses: its domain,
// reasons and metadata keys. The server's table (cluster/errors.go) sets
// them; the client's inverse (client/errors.go) reads them.
const (
	// ErrorDomain is the ErrorInfo domain of leasefence statuses.
	ErrorDomain = "leasefence"
	// ReasonIndeterminate marks an Unavailable whose call may or may not
	// have taken effect: it reached Raft, or a leader that stopped
	// answering. Retrying with the same request id is safe.
	ReasonIndeterminate = "INDETERMINATE"
	// MetaRequestID is the ErrorInfo metadata key of the request id to
	// retry with (absent when the call carried none).
	MetaRequestID = "request-id"
)
