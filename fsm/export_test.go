package fsm

// CountHeld returns how many leases not yet past expires_at have a holder
// that match accepts, walking every lease: O(leases held). The tests hold
// HeldBy, which the node uses, against it.
func (s *State) CountHeld(match func(holder string) bool) int {
	n := 0
	for _, it := range s.expiry {
		if l := it.s.l; l.ExpiresAt >= s.now && match(l.Holder) {
			n++
		}
	}
	return n
}
