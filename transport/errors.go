package transport

import (
	"errors"
	"fmt"
)

// Sentinel errors of this package. Callers test them with errors.Is; they are
// usually wrapped with the operation and the peer address.
//
// After Close the raft sentinels raft.ErrTransportShutdown (every call on the
// Transport) and raft.ErrPipelineShutdown (a closed AppendPipeline) are
// returned instead, because hashicorp/raft recognises those.
var (
	// ErrInvalidConfig is returned by New and Config.Validate when a field is
	// out of range or fields contradict each other. The wrapping error names
	// the field.
	ErrInvalidConfig = errors.New("transport: invalid config")

	// ErrInvalidMessage is returned when a message received from the network
	// cannot be turned into raft's structs: a missing header or request, a
	// number out of range (log type above 255, a version that does not fit
	// an int), an invalid timestamp, or an InstallSnapshot stream whose
	// messages come in the wrong order. The server answers such a request
	// with codes.InvalidArgument and never hands it to raft.
	ErrInvalidMessage = errors.New("transport: invalid message")

	// ErrSnapshotSize is returned when the snapshot data of an
	// InstallSnapshot does not match InstallSnapshotRequest.Size: the
	// sender's reader yields more or fewer bytes, or the receiver gets more
	// or fewer bytes before the stream ends. The server answers with
	// codes.InvalidArgument.
	ErrSnapshotSize = errors.New("transport: snapshot data does not match announced size")

	// ErrUnexpectedResponse is returned by the server half (as codes.Internal)
	// when the local raft answers an RPC with a response of the wrong type.
	// It indicates a bug, never a network fault.
	ErrUnexpectedResponse = errors.New("transport: unexpected response type from raft")

	// ErrVotesHeld is returned by RequestVote and RequestPreVote while
	// HoldVotes holds this node's votes: its own vote requests are not
	// sent.
	ErrVotesHeld = errors.New("transport: this node holds its votes for now (it may lack entries the cluster committed)")
)

// RemoteError is the error the remote raft handler returned for an RPC
// (raft.RPCResponse.Error), carried back to the caller. The response that
// came with it, if any, has still been copied into the caller's response
// struct, as raft's own network transport does.
type RemoteError struct {
	// Message is the remote error's text.
	Message string
}

// Error implements error.
func (e *RemoteError) Error() string {
	return fmt.Sprintf("transport: remote raft: %s", e.Message)
}

// remoteError returns nil for an empty message and a *RemoteError otherwise.
func remoteError(msg string) error {
	if msg == "" {
		return nil
	}
	return &RemoteError{Message: msg}
}

// invalidf returns an ErrInvalidMessage wrapped with a description.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidMessage, fmt.Sprintf(format, args...))
}
