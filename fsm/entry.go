package fsm

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/proto"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// EntryType is the first byte of every log entry. Numbers are explicit and
// only ever appended; a retired type stays here as a deprecated constant.
type EntryType uint8

const (
	// EntryBatch is a fsmpb.Batch without a checksum: type byte, protobuf
	// body. Written by versions before EntryBatchChecked; still applied so
	// that their logs replay, never written any more.
	//
	// Deprecated: write EntryBatchChecked.
	EntryBatch EntryType = 1

	// EntryBatchChecked is a fsmpb.Batch with a checksum: type byte, the
	// CRC-32C (Castagnoli, big endian, 4 bytes) of the type byte followed
	// by the body, then the protobuf body. The checksum is verified before
	// the body is decoded: a byte changed on disk (a resource name, a
	// token-bearing field) is refused, never applied as another command.
	EntryBatchChecked EntryType = 2

	// EntryIgnorable is a flag bit: an entry type with it set that this
	// version does not know is skipped instead of stopping the node. Use it
	// only for entries whose loss cannot change lease state.
	EntryIgnorable EntryType = 0x80
)

// checksumLen is the size of an EntryBatchChecked entry's checksum.
const checksumLen = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// typeBytes holds every byte value, so that a type byte can be checksummed
// without an allocation.
var typeBytes = func() (b [256]byte) {
	for i := range b {
		b[i] = byte(i)
	}
	return b
}()

// entryChecksum is the CRC-32C of the type byte followed by body.
func entryChecksum(t EntryType, body []byte) uint32 {
	c := crc32.Update(0, castagnoli, typeBytes[t:t+1])
	return crc32.Update(c, castagnoli, body)
}

func encodeBody(b *fsmpb.Batch) ([]byte, error) {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("fsm: encode batch: %w", err)
	}
	return body, nil
}

// EncodeBatch returns the log entry bytes for b: an EntryBatchChecked
// entry.
func EncodeBatch(b *fsmpb.Batch) ([]byte, error) {
	body, err := encodeBody(b)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 1+checksumLen+len(body))
	out[0] = byte(EntryBatchChecked)
	binary.BigEndian.PutUint32(out[1:], entryChecksum(EntryBatchChecked, body))
	copy(out[1+checksumLen:], body)
	return out, nil
}

// VerifyEntry checks the checksum of entry bytes without decoding the
// body, for a log store that verifies what it reads from disk. It returns
// an error wrapping ErrChecksum (and so ErrCorruptEntry) for a checksummed
// entry whose bytes do not match, or one too short to hold its checksum,
// and nil for every other entry: an entry type without a checksum
// (EntryBatch, an ignorable type) cannot be verified here, and an unknown
// or empty one is Apply's to refuse. It never panics. opts are the node's
// (WithTestingKnobs), so that a planted skip-entry-checksum skips this
// check as it skips Apply's.
func VerifyEntry(data []byte, opts ...Option) error {
	if len(data) == 0 || EntryType(data[0]) != EntryBatchChecked {
		return nil
	}
	o := applyOptions(opts)
	_, err := checkedBody(data, &o.knobs)
	return err
}

// checkedBody returns the body of an EntryBatchChecked entry after
// verifying its checksum (unless k plants BugSkipEntryChecksum).
func checkedBody(data []byte, k *TestingKnobs) ([]byte, error) {
	if len(data) < 1+checksumLen {
		return nil, fmt.Errorf("%w: entry of %d bytes cannot hold its checksum", ErrChecksum, len(data))
	}
	want := binary.BigEndian.Uint32(data[1:])
	body := data[1+checksumLen:]
	if k.planted(BugSkipEntryChecksum) {
		return body, nil
	}
	if got := entryChecksum(EntryType(data[0]), body); got != want {
		return nil, fmt.Errorf("%w: crc32c %08x, entry says %08x (%d bytes)", ErrChecksum, got, want, len(data))
	}
	return body, nil
}

// DecodeEntry parses log entry bytes without applying them, for tools that
// read a log offline (leased dump-log). It returns (nil, nil) for an
// unknown ignorable entry and the same errors Apply would.
func DecodeEntry(data []byte) (*fsmpb.Batch, error) { return decodeEntry(data, nil) }

// decodeEntry parses entry bytes. It returns (nil, nil) for an unknown
// ignorable entry, and ErrCorruptEntry (ErrChecksum included) or
// ErrUnknownEntry (wrapped) for anything it cannot apply safely.
// k is the caller's test switches (nil: none).
func decodeEntry(data []byte, k *TestingKnobs) (*fsmpb.Batch, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty entry", ErrCorruptEntry)
	}
	t := EntryType(data[0])
	var body []byte
	switch t {
	case EntryBatch:
		body = data[1:]
	case EntryBatchChecked:
		var err error
		if body, err = checkedBody(data, k); err != nil {
			return nil, err
		}
	default:
		if t&EntryIgnorable != 0 {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: type %d", ErrUnknownEntry, t)
	}
	var b fsmpb.Batch
	if err := proto.Unmarshal(body, &b); err != nil {
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
}
