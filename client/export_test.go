package client

import "time"

// StallKeepAlive stops (or resumes) every renewal this client sends: the
// test hook for a holder whose keep-alive cannot get through.
func StallKeepAlive(c *Client, stalled bool) { c.keeper.stalled.Store(stalled) }

// SafeUntilOnClock returns l's safe deadline as a reading of the client's
// Clock.
func SafeUntilOnClock(l *Lease) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.safeUntil
}

// KeptLeases returns how many leases c's keep-alive holds: by id, and in
// its renewal schedule.
func KeptLeases(c *Client) (byID, due int) {
	c.keeper.mu.Lock()
	defer c.keeper.mu.Unlock()
	return len(c.keeper.leases), len(c.keeper.due)
}
