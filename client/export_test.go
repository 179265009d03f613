package client

// StallKeepAlive stops (or resumes) every renewal this client sends: the
// test hook for a holder whose keep-alive cannot get through.
func StallKeepAlive(c *Client, stalled bool) { c.keeper.stalled.Store(stalled) }
