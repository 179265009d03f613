package fsm

// Names of the FSM's planted defects. Only a build with the plantedbugs tag
// can switch them on, per State, through WithTestingKnobs (planted.go); see
// jepsen/README.md, "Planted bugs".
const (
	BugGrantNoMargin         = "grant-no-margin"
	BugRenewAfterExpiry      = "renew-after-expiry"
	BugSnapshotDropsCounters = "snapshot-drops-counters"
	BugDedupResourceOnly     = "dedup-resource-only"
	// BugRestoreBumpsKnownScopes is issue 13's restore: RaiseFloor raises
	// only the counters of scopes the backup knows and leaves the floor.
	BugRestoreBumpsKnownScopes = "restore-bumps-known-scopes"
	BugSkipEntryChecksum       = "skip-entry-checksum"
	// BugIgnorableUnchecked is the code before ignorable entries carried
	// a checksum: a flipped high bit of a type byte (0x02 → 0x82) made a
	// committed entry one the node skips.
	BugIgnorableUnchecked = "ignorable-unchecked"
)
