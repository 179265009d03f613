package fsm

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// viewMatchesProto fails t unless viewBatch reads body as protobuf does:
// both refuse it, or both accept it with the same header and commands.
func viewMatchesProto(t *testing.T, body []byte) *batchView {
	t.Helper()
	v, verr := viewBatch(body)
	var b fsmpb.Batch
	perr := proto.Unmarshal(body, &b)
	if (verr == nil) != (perr == nil) {
		t.Fatalf("view error %v, protobuf error %v, body %x", verr, perr, body)
	}
	if verr != nil {
		return nil
	}
	got := v.batch() // what Apply reads, also when protobuf decoded the whole body
	// Apply never reads unknown fields, and a view keeps none of its own.
	dropUnknown(got)
	dropUnknown(&b)
	if !proto.Equal(got, &b) {
		t.Fatalf("view %v, protobuf %v, body %x", got, &b, body)
	}
	return v
}

// dropUnknown removes the unknown fields of b, its commands and their ops.
func dropUnknown(b *fsmpb.Batch) {
	b.ProtoReflect().SetUnknown(nil)
	for _, c := range b.Commands {
		c.ProtoReflect().SetUnknown(nil)
		if op := c.GetRenew(); op != nil {
			op.ProtoReflect().SetUnknown(nil)
		}
	}
}

// TestViewReadsEncodedRenewalsWithoutProtobuf: the renewals of a batch the
// leader encodes are read by the view itself (so the test below is not
// vacuous), each id a slice of the body, and other commands by protobuf.
func TestViewReadsEncodedRenewalsWithoutProtobuf(t *testing.T) {
	b := &fsmpb.Batch{NowNs: 7 * sec, SkewMarginNs: testMargin, DedupKeepNs: testKeep, MaxRefusals: 3,
		Commands: []*fsmpb.Command{renewCmd(1), acquireCmd("a", 10*sec, 2, "req"), renewCmd(3), releaseCmd(1), tickCmd(), renewCmd(4)}}
	body, err := encodeBody(b)
	if err != nil {
		t.Fatal(err)
	}
	v := viewMatchesProto(t, body)
	if v.whole != nil {
		t.Fatal("the leader's batch was decoded by protobuf as a whole")
	}
	for i, c := range v.cmds {
		_, isRenew := b.Commands[i].Op.(*fsmpb.Command_Renew)
		if (c.cmd == nil) != isRenew {
			t.Fatalf("command %d: read as a renewal %v, is one %v", i, c.cmd == nil, isRenew)
		}
		if c.cmd == nil && !bytes.Contains(body, c.renewID) {
			t.Fatalf("command %d: id %x not from the body", i, c.renewID)
		}
	}
}

// TestViewFallsBackWhereItCannotBeSure: shapes the view leaves to
// protobuf, each read as protobuf reads it.
func TestViewFallsBackWhereItCannotBeSure(t *testing.T) {
	renew := func(inner []byte) []byte { // a Command holding Renew bytes inner
		return protowire.AppendBytes(protowire.AppendTag(nil, commandRenew, protowire.BytesType), inner)
	}
	id := leaseID(9)
	idField := protowire.AppendBytes(protowire.AppendTag(nil, renewLeaseID, protowire.BytesType), id)
	cmd := func(c []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, batchCommands, protowire.BytesType), c)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	unknownVarint := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)
	var header []byte // every header field set, each to its own value
	for _, num := range []protowire.Number{batchNowNs, batchSkewMarginNs, batchDedupKeepNs, batchRefusalKeepNs, batchMaxRefusals} {
		header = protowire.AppendVarint(protowire.AppendTag(header, num, protowire.VarintType), uint64(100+num))
	}
	for name, tc := range map[string]struct {
		body      []byte
		wantWhole bool
		wantRenew bool
	}{
		"plain renewal":             {body: cat(header, cmd(renew(idField))), wantRenew: true},
		"lease id twice, last wins": {body: cmd(renew(cat(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), leaseID(1)), idField))), wantRenew: true},
		"empty renew":               {body: cmd(renew(nil))},
		"renew with unknown field":  {body: cmd(renew(cat(idField, unknownVarint)))},
		"command with two ops":      {body: cmd(cat(renew(idField), renew(idField)))},
		"renew then acquire op":     {body: cmd(cat(renew(idField), protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), nil)))},
		"unknown header field":      {body: cat(header, unknownVarint, cmd(renew(idField))), wantWhole: true},
		"now_ns as bytes":           {body: cat(protowire.AppendBytes(protowire.AppendTag(nil, batchNowNs, protowire.BytesType), nil), cmd(renew(idField))), wantWhole: true},
		"commands as varint":        {body: protowire.AppendVarint(protowire.AppendTag(nil, batchCommands, protowire.VarintType), 5), wantWhole: true},
		"negative now, ten bytes":   {body: protowire.AppendVarint(protowire.AppendTag(nil, batchNowNs, protowire.VarintType), uint64(1<<63))},
		"truncated command":         {body: cmd(renew(idField))[:10]},
		"header field twice":        {body: cat(protowire.AppendVarint(protowire.AppendTag(nil, batchNowNs, protowire.VarintType), 5), protowire.AppendVarint(protowire.AppendTag(nil, batchNowNs, protowire.VarintType), 6))},
	} {
		t.Run(name, func(t *testing.T) {
			v := viewMatchesProto(t, tc.body)
			if v == nil {
				return
			}
			if (v.whole != nil) != tc.wantWhole {
				t.Fatalf("decoded whole %v, want %v", v.whole != nil, tc.wantWhole)
			}
			if len(v.cmds) > 0 && (v.cmds[0].cmd == nil) != tc.wantRenew {
				t.Fatalf("read as a renewal %v, want %v", v.cmds[0].cmd == nil, tc.wantRenew)
			}
		})
	}
}

// FuzzViewBatchMatchesProto: on any bytes the view and protobuf agree.
func FuzzViewBatchMatchesProto(f *testing.F) {
	for _, cmds := range [][]*fsmpb.Command{
		{renewCmd(1)},
		{renewCmd(1), renewCmd(2), acquireCmd("a", 10*sec, 3, "r"), releaseCmd(2), tickCmd()},
		{renewCmdID(nil)},
	} {
		body, err := encodeBody(&fsmpb.Batch{NowNs: sec, SkewMarginNs: testMargin, DedupKeepNs: testKeep, RefusalKeepNs: 1, Commands: cmds})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) { viewMatchesProto(t, body) })
}

// TestRenewalKeepsNoByteOfItsEntry: a renewal read from the entry's own
// bytes leaves nothing in the state that points into them.
func TestRenewalKeepsNoByteOfItsEntry(t *testing.T) {
	s := New()
	apply(t, s, 0, acquireCmd("a", 10*sec, 1, ""))
	e := entry(t, 1*sec, renewCmd(1))
	a, err := s.Apply(e)
	if err != nil || a.Results[0].Err != nil {
		t.Fatalf("renew: %v %+v", err, a)
	}
	before := snapshotBytes(t, s)
	for i := range e {
		e[i] = 0xff
	}
	if !bytes.Equal(before, snapshotBytes(t, s)) {
		t.Fatal("overwriting the applied entry changed the state")
	}
	if l, ok := s.LeaseByID([LeaseIDLen]byte(leaseID(1))); !ok || l.Resource != "a" {
		t.Fatalf("lease 1 after the entry was overwritten: %+v %v", l, ok)
	}
}
