package api

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Every JSON request in docs/CLIENTS.md's grpcurl session parses as the
// request of the method it is sent to, so a newcomer who copies it gets
// past the JSON mapping (field names, durations, base64 ids).
func TestClientDocRequestsParse(t *testing.T) {
	doc, err := os.ReadFile("../docs/CLIENTS.md")
	if err != nil {
		t.Fatal(err)
	}
	requests := map[string]func() proto.Message{
		"Acquire":   func() proto.Message { return &AcquireRequest{} },
		"Renew":     func() proto.Message { return &RenewRequest{} },
		"Release":   func() proto.Message { return &ReleaseRequest{} },
		"Watch":     func() proto.Message { return &WatchRequest{} },
		"KeepAlive": func() proto.Message { return &KeepAliveRequest{} },
	}
	single := regexp.MustCompile(`-d '(\{[^']*\})'(?: \\\n)?[^\n]*?LeaseService/(\w+)`)
	n := 0
	for _, m := range single.FindAllStringSubmatch(string(doc), -1) {
		newReq, ok := requests[m[2]]
		if !ok {
			t.Errorf("no request type for %s", m[2])
			continue
		}
		if err := protojson.Unmarshal([]byte(m[1]), newReq()); err != nil {
			t.Errorf("%s request %s: %v", m[2], m[1], err)
		}
		n++
	}
	// The KeepAlive stream's lines, fed to grpcurl -d @.
	stream := regexp.MustCompile(`(?s)KeepAlive <<'EOF'\n(.*?)\nEOF`).FindStringSubmatch(string(doc))
	if stream == nil {
		t.Fatal("no KeepAlive stream in the doc")
	}
	for _, line := range strings.Split(stream[1], "\n") {
		var req KeepAliveRequest
		if err := protojson.Unmarshal([]byte(line), &req); err != nil || len(req.LeaseId) != LeaseIDLen {
			t.Errorf("KeepAlive line %s: %v", line, err)
		}
		n++
	}
	if n < 6 {
		t.Fatalf("found only %d requests in the doc", n)
	}
}
