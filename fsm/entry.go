package fsm

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// EntryType is the first byte of every log entry. Numbers are explicit and
// only ever appended; a retired type stays here as a deprecated constant.
type EntryType uint8

const (
	// EntryBatch is a fsmpb.Batch: stamped commands applied in order.
	EntryBatch EntryType = 1

	// EntryIgnorable is a flag bit: an entry type with it set that this
	// version does not know is skipped instead of stopping the node. Use it
	// only for entries whose loss cannot change lease state.
	EntryIgnorable EntryType = 0x80
)

// EncodeBatch returns the log entry bytes for b.
func EncodeBatch(b *fsmpb.Batch) ([]byte, error) {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("fsm: encode batch: %w", err)
	}
	out := make([]byte, 1+len(body))
	out[0] = byte(EntryBatch)
	copy(out[1:], body)
	return out, nil
}

// DecodeEntry parses log entry bytes without applying them, for tools that
// read a log offline (leased dump-log). It returns (nil, nil) for an
// unknown ignorable entry and the same errors Apply would.
func DecodeEntry(data []byte) (*fsmpb.Batch, error) { return decodeEntry(data) }

// decodeEntry parses entry bytes. It returns (nil, nil) for an unknown
// ignorable entry, and ErrCorruptEntry or ErrUnknownEntry (wrapped) for
// anything it cannot apply safely.
func decodeEntry(data []byte) (*fsmpb.Batch, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty entry", ErrCorruptEntry)
	}
	t := EntryType(data[0])
	switch t {
	case EntryBatch:
		var b fsmpb.Batch
		if err := proto.Unmarshal(data[1:], &b); err != nil {
			return nil, fmt.Errorf("%w: batch: %v", ErrCorruptEntry, err)
		}
		for i, c := range b.Commands {
			if c.GetOp() == nil {
				return nil, fmt.Errorf("%w: batch command %d has no known op", ErrUnknownEntry, i)
			}
		}
		if b.SkewMarginNs < 0 || b.DedupKeepNs < 0 || b.RefusalKeepNs < 0 {
			return nil, fmt.Errorf("%w: negative parameter in batch header", ErrCorruptEntry)
		}
		return &b, nil
	default:
		if t&EntryIgnorable != 0 {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: type %d", ErrUnknownEntry, t)
	}
}
