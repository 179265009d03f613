package api

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
)

var sampleID = []byte{0x3f, 0x2a, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0xee}

// The id leasectl prints is the one grpcurl (the protobuf JSON mapping)
// shows and accepts: copied either way, it names the same lease.
func TestLeaseIDTextIsTheProtobufJSONForm(t *testing.T) {
	text := FormatLeaseID(sampleID)
	if text != "PyoBAgMEBQYHCAkKCwwN7g==" {
		t.Fatalf("FormatLeaseID = %q", text)
	}
	js, err := protojson.Marshal(&RenewRequest{LeaseId: sampleID})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"`+text+`"`) {
		t.Fatalf("protojson shows %s, leasectl prints %s", js, text)
	}
	var req RenewRequest
	if err := protojson.Unmarshal([]byte(`{"leaseId":"`+text+`"}`), &req); err != nil || !bytes.Equal(req.LeaseId, sampleID) {
		t.Fatalf("the printed id pasted into a JSON request: %x %v", req.LeaseId, err)
	}
}

func TestParseLeaseIDAcceptsBase64AndLegacyHexOnly(t *testing.T) {
	for _, s := range []string{"PyoBAgMEBQYHCAkKCwwN7g==", "PyoBAgMEBQYHCAkKCwwN7g", "3f2a0102030405060708090a0b0c0dee"} {
		if b, err := ParseLeaseID(s); err != nil || !bytes.Equal(b, sampleID) {
			t.Errorf("ParseLeaseID(%q) = %x, %v", s, b, err)
		}
	}
	for _, s := range []string{"", "PyoB", "3F2A0102030405060708090A0B0C0DEE", "PyoBAgMEBQYHCAkKCwwN7g==AA==", "3f2a0102030405060708090a0b0c0de", "not an id at all!"} {
		if b, err := ParseLeaseID(s); err == nil || !strings.Contains(err.Error(), "24-character base64") {
			t.Errorf("ParseLeaseID(%q) = %x, %v; want the error", s, b, err)
		}
	}
}
