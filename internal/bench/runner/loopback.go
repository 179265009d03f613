package runner

import (
	"fmt"
	"net"
)

// CheckLoopback returns an error unless addr (host:port) names a loopback
// address: the tool sends load only to this machine unless told otherwise.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("runner: endpoint %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("runner: endpoint %q is not a loopback address (--allow-nonloopback to permit)", addr)
	}
	return nil
}
