package api

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
)

// LeaseIDLen is the length of a lease id in bytes.
const LeaseIDLen = 16

// FormatLeaseID returns the one text form of a lease id: standard base64
// with padding (24 characters), which is how the protobuf JSON mapping, and
// so grpcurl and every language's JSON encoder, shows a bytes field. leasectl,
// its --json output, the client library's ID.String, the node's logs and
// error messages all print this form, so an id copied from any of them can
// be pasted into any other, grpcurl's JSON requests included.
func FormatLeaseID(id []byte) string { return base64.StdEncoding.EncodeToString(id) }

// ParseLeaseID parses a lease id in the form FormatLeaseID prints (also
// without padding, or in URL-safe base64, as the protobuf JSON mapping
// accepts) or as 32 lowercase hex digits, the form leasectl printed before
// 2026-12. Anything that is not exactly LeaseIDLen bytes is an error.
func ParseLeaseID(s string) ([]byte, error) {
	if len(s) == 2*LeaseIDLen && isLowerHex(s) {
		return hex.DecodeString(s)
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == LeaseIDLen {
			return b, nil
		}
	}
	return nil, fmt.Errorf("lease id %q: want the 24-character base64 id leasectl and grpcurl print (such as %s), or 32 lowercase hex digits",
		s, FormatLeaseID(make([]byte, LeaseIDLen)))
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
