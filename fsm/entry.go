package fsm

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/encoding/protowire"
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
	// only for entries whose loss cannot change lease state. Such an entry
	// is checksummed as EntryBatchChecked is (type byte, CRC-32C of the
	// type byte and the body, body), and skipped only when the checksum
	// matches: one flipped bit must not turn a known entry (0x02 → 0x82)
	// into one a node skips, as it did before the checksum was required —
	// the grant in it silently missing from that replica. No version
	// wrote an ignorable entry before the requirement.
	EntryIgnorable EntryType = 0x80

	// EntryNodeServed records that a node has served as a member of the
	// cluster (fsmpb.NodeServed; checksummed as every ignorable type). It
	// is ignorable: it changes no lease, and a version before it skips it
	// (its founders are then only unguarded, as they were).
	EntryNodeServed EntryType = EntryIgnorable | 1
)

// EncodeNodeServed returns the log entry bytes recording that the node
// nodeID has served: an EntryNodeServed entry. nodeID must be a valid name
// (ValidateName).
func EncodeNodeServed(nodeID string) ([]byte, error) {
	if err := ValidateName("node id", nodeID); err != nil {
		return nil, err
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(&fsmpb.NodeServed{NodeId: nodeID})
	if err != nil {
		return nil, fmt.Errorf("fsm: encode node served: %w", err)
	}
	return frame(EntryNodeServed, body), nil
}

// frame returns a checksummed entry: type byte t, the CRC-32C of t and
// body, body.
func frame(t EntryType, body []byte) []byte {
	out := make([]byte, 1+checksumLen+len(body))
	out[0] = byte(t)
	binary.BigEndian.PutUint32(out[1:], entryChecksum(t, body))
	copy(out[1+checksumLen:], body)
	return out
}

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
	c := crc32.Update(0, castagnoli, typeBytes[int(t):int(t)+1]) // int: t+1 of 0xff is 0 in a byte
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
	return frame(EntryBatchChecked, body), nil
}

// VerifyEntry checks the checksum of entry bytes without decoding the
// body, for a log store that verifies what it reads from disk. It returns
// an error wrapping ErrChecksum (and so ErrCorruptEntry) for a checksummed
// entry (EntryBatchChecked or any ignorable type) whose bytes do not
// match, or one too short to hold its checksum, and nil for every other
// entry: EntryBatch has no checksum to verify, and an unknown or empty
// one is Apply's to refuse. It never panics. opts are the node's
// (WithTestingKnobs), so that a planted skip-entry-checksum skips this
// check as it skips Apply's.
func VerifyEntry(data []byte, opts ...Option) error {
	o := applyOptions(opts)
	if len(data) == 0 || !checksummed(EntryType(data[0]), &o.knobs) {
		return nil
	}
	_, err := checkedBody(data, &o.knobs)
	return err
}

// checksummed reports whether entries of type t carry a checksum to
// verify: EntryBatchChecked and every ignorable type (not the latter when
// k plants BugIgnorableUnchecked).
func checksummed(t EntryType, k *TestingKnobs) bool {
	return t == EntryBatchChecked || t&EntryIgnorable != 0 && !k.planted(BugIgnorableUnchecked)
}

// checkedBody returns the body of a checksummed entry after
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
// ignorable entry (an unknown one, or EntryNodeServed, which holds no
// command) and the same errors Apply would.
func DecodeEntry(data []byte) (*fsmpb.Batch, error) {
	v, err := decodeEntry(data, nil)
	if v == nil || err != nil || v.served != "" {
		return nil, err
	}
	if v.whole != nil {
		return v.whole, nil // unknown fields and all
	}
	return v.batch(), nil
}

// batchView is an entry as Apply reads it: the header, and each command
// either a renewal, whose lease id is a slice of the entry's own bytes, or
// any other command decoded by protobuf. A renewal, most of a busy log's
// commands, so costs no allocation to decode; the view must not outlive
// the entry's bytes.
type batchView struct {
	now    int64
	params batchParams // as written: refusalKeep 0 is not yet keep
	cmds   []cmdView
	whole  *fsmpb.Batch // the message, when protobuf decoded it as a whole
	// served is the node id of an EntryNodeServed entry (no commands).
	served string
}

// cmdView is one command of a batchView: cmd, or when cmd is nil a renewal
// of renewID.
type cmdView struct {
	renewID []byte
	cmd     *fsmpb.Command
}

// batch returns what Apply reads of v as a protobuf message.
func (v *batchView) batch() *fsmpb.Batch {
	b := &fsmpb.Batch{NowNs: v.now, SkewMarginNs: v.params.margin, DedupKeepNs: v.params.keep,
		RefusalKeepNs: v.params.refusalKeep, MaxRefusals: v.params.maxRefusals, Commands: make([]*fsmpb.Command, len(v.cmds))}
	for i, c := range v.cmds {
		if c.cmd == nil {
			c.cmd = &fsmpb.Command{Op: &fsmpb.Command_Renew{Renew: &fsmpb.Renew{LeaseId: append([]byte{}, c.renewID...)}}}
		}
		b.Commands[i] = c.cmd
	}
	return b
}

// decodeEntry parses entry bytes. It returns (nil, nil) for an unknown
// ignorable entry, and ErrCorruptEntry (ErrChecksum included) or
// ErrUnknownEntry (wrapped) for anything it cannot apply safely.
// k is the caller's test switches (nil: none).
func decodeEntry(data []byte, k *TestingKnobs) (*batchView, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty entry", ErrCorruptEntry)
	}
	t := EntryType(data[0])
	var body []byte
	if checksummed(t, k) {
		var err error
		if body, err = checkedBody(data, k); err != nil {
			return nil, err
		}
	}
	switch {
	case t == EntryBatch:
		body = data[1:]
	case t == EntryBatchChecked:
	case t == EntryNodeServed && checksummed(t, k):
		return viewNodeServed(body)
	case t&EntryIgnorable != 0:
		return nil, nil // unknown to this version; its checksum matched
	default:
		return nil, fmt.Errorf("%w: type %d", ErrUnknownEntry, t)
	}
	v, err := viewBatch(body)
	if err != nil {
		return nil, err
	}
	for i, c := range v.cmds {
		if c.cmd != nil && c.cmd.GetOp() == nil {
			return nil, fmt.Errorf("%w: batch command %d has no known op", ErrUnknownEntry, i)
		}
	}
	if v.params.margin < 0 || v.params.keep < 0 || v.params.refusalKeep < 0 {
		return nil, fmt.Errorf("%w: negative parameter in batch header", ErrCorruptEntry)
	}
	return v, nil
}

// Field numbers of fsmpb.Batch, Command and Renew that viewBatch reads.
const (
	batchNowNs         protowire.Number = 1
	batchSkewMarginNs  protowire.Number = 2
	batchDedupKeepNs   protowire.Number = 3
	batchCommands      protowire.Number = 4
	batchRefusalKeepNs protowire.Number = 5
	batchMaxRefusals   protowire.Number = 6
	commandRenew       protowire.Number = 2
	renewLeaseID       protowire.Number = 1
)

// renewCommandLen is the encoded size of a Batch's command field holding a
// renewal of a 16-byte lease id, to size the view's command slice.
const renewCommandLen = 22

// viewBatch decodes a Batch body. It reads the wire format itself only
// where the result is certain to equal protobuf's: a header whose fields
// are the known ones with their own wire types, and a command that is
// nothing but a Renew holding nothing but lease ids (the last one counts,
// as in protobuf). Any other command is decoded by protobuf, and a body
// with anything else in its header, or bytes the loop cannot read, by
// protobuf as a whole, which also gives the error. FuzzViewBatchMatchesProto
// holds it to that.
func viewBatch(body []byte) (*batchView, error) {
	v := &batchView{cmds: make([]cmdView, 0, len(body)/renewCommandLen+1)}
	for b := body; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return viewWhole(body)
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && num != batchCommands:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return viewWhole(body)
			}
			b = b[n:]
			switch num {
			case batchNowNs:
				v.now = int64(x)
			case batchSkewMarginNs:
				v.params.margin = int64(x)
			case batchDedupKeepNs:
				v.params.keep = int64(x)
			case batchRefusalKeepNs:
				v.params.refusalKeep = int64(x)
			case batchMaxRefusals:
				v.params.maxRefusals = x
			default:
				return viewWhole(body)
			}
		case typ == protowire.BytesType && num == batchCommands:
			cb, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return viewWhole(body)
			}
			b = b[n:]
			if id, ok := renewOnly(cb); ok {
				v.cmds = append(v.cmds, cmdView{renewID: id})
				continue
			}
			c := &fsmpb.Command{}
			if err := proto.Unmarshal(cb, c); err != nil {
				return nil, fmt.Errorf("%w: batch: %v", ErrCorruptEntry, err)
			}
			v.cmds = append(v.cmds, cmdView{cmd: c})
		default:
			return viewWhole(body)
		}
	}
	return v, nil
}

// renewOnly returns the lease id of a Command's bytes that hold one
// Command.renew field and nothing else, whose Renew holds lease_id fields
// and nothing else.
func renewOnly(cb []byte) ([]byte, bool) {
	num, typ, n := protowire.ConsumeTag(cb)
	if n < 0 || num != commandRenew || typ != protowire.BytesType {
		return nil, false
	}
	rb, m := protowire.ConsumeBytes(cb[n:])
	if m < 0 || n+m != len(cb) {
		return nil, false
	}
	var id []byte
	seen := false
	for len(rb) > 0 {
		num, typ, n := protowire.ConsumeTag(rb)
		if n < 0 || num != renewLeaseID || typ != protowire.BytesType {
			return nil, false
		}
		x, m := protowire.ConsumeBytes(rb[n:])
		if m < 0 {
			return nil, false
		}
		id, seen = x, true
		rb = rb[n+m:]
	}
	return id, seen
}

// viewWhole decodes body with protobuf alone.
func viewWhole(body []byte) (*batchView, error) {
	var b fsmpb.Batch
	if err := proto.Unmarshal(body, &b); err != nil {
		return nil, fmt.Errorf("%w: batch: %v", ErrCorruptEntry, err)
	}
	v := &batchView{now: b.NowNs, params: batchParams{margin: b.SkewMarginNs, keep: b.DedupKeepNs,
		refusalKeep: b.RefusalKeepNs, maxRefusals: b.MaxRefusals}, cmds: make([]cmdView, len(b.Commands)), whole: &b}
	for i, c := range b.Commands {
		v.cmds[i].cmd = c
	}
	return v, nil
}

// viewNodeServed decodes an EntryNodeServed body (its checksum matched):
// a node id that is not a valid name is a corrupt entry, as garbage in a
// batch is.
func viewNodeServed(body []byte) (*batchView, error) {
	var m fsmpb.NodeServed
	if err := proto.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("%w: node served: %v", ErrCorruptEntry, err)
	}
	if err := ValidateName("node id", m.NodeId); err != nil {
		return nil, fmt.Errorf("%w: node served: %v", ErrCorruptEntry, err)
	}
	return &batchView{served: m.NodeId}, nil
}
