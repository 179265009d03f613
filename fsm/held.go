package fsm

import "strings"

// OwnerSep separates the owner of a holder label from the rest of it: the
// leases of owner "svc-a" are those whose holder is "svc-a" or begins with
// "svc-a|". (cluster labels leases "<identity>|<label>" under a policy and
// limits the leases per identity by HeldBy.)
const OwnerSep = "|"

// ownerOf returns the owner part of a holder label.
func ownerOf(holder string) string {
	if i := strings.Index(holder, OwnerSep); i >= 0 {
		return holder[:i]
	}
	return holder
}

// countOwner adds delta to the count of holder's owner. The counts are
// derived state: index and remove keep them, so Restore (which builds
// through index) rebuilds them; they are not in snapshots.
//
// Invariant: owners[o] is the number of leases in byID whose ownerOf(Holder)
// is o, and no entry is zero.
func (s *State) countOwner(holder string, delta int) {
	if s.owners == nil {
		s.owners = make(map[string]int)
	}
	o := ownerOf(holder)
	n := s.owners[o] + delta
	if n <= 0 {
		delete(s.owners, o)
		return
	}
	s.owners[o] = n
}

// HeldBy returns how many leases the state holds whose holder is owner or
// begins with owner+OwnerSep, in O(1). It counts a lease
// until it is removed (released, expired by a Tick, replaced by a new
// grant), so a lease past expires_at that no Tick has removed yet (at most
// skew_margin plus a tick) still counts: for a limit this errs on the side
// of refusing. An owner containing OwnerSep holds nothing.
func (s *State) HeldBy(owner string) int { return s.owners[owner] }
