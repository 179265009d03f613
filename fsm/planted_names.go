package fsm

// Names of the FSM's planted defects. Only a build with the plantedbugs tag
// can switch them on (planted.go); see jepsen/README.md, "Planted bugs".
const (
	BugGrantNoMargin         = "grant-no-margin"
	BugRenewAfterExpiry      = "renew-after-expiry"
	BugSnapshotDropsCounters = "snapshot-drops-counters"
	BugSkipEntryChecksum     = "skip-entry-checksum"
)
