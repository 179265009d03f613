package client

// Names of the client's planted defects: each breaks the safe deadline
// sent_at + ttl_remaining×(1−drift) − margin in one way, so that a check of
// the holders' safe windows (the jepsen checker safe-windows-disjoint, and
// this package's tests) can be shown to fail. Only a build with the
// plantedbugs tag can switch them on, per client, through Config.Testing
// (planted.go); see jepsen/README.md, "Planted bugs".
const (
	// BugSentAtOnAnswer takes sent_at when the answer arrives, not when
	// the request was sent.
	BugSentAtOnAnswer = "client-sent-at-on-answer"
	// BugFullTTL uses the lease's full ttl instead of the ttl_remaining
	// the answer reported.
	BugFullTTL = "client-full-ttl"
	// BugNoDrift ignores the drift bound.
	BugNoDrift = "client-no-drift"
	// BugZeroMargin subtracts no client margin.
	BugZeroMargin = "client-zero-margin"
	// BugMonotonicClock measures safe deadlines on Go's monotonic clock,
	// which stops while the host is suspended, instead of Config.Clock
	// (CLOCK_BOOTTIME): a suspend stretches the window by its length.
	BugMonotonicClock = "client-monotonic-clock"
	// BugSilenceFromLastAnswer counts a keep-alive stream's silence from
	// its last answer alone (the behaviour before the fix in silentFor):
	// after an idle spell longer than the silence bound, the renewal just
	// sent makes a healthy stream look silent, so it is torn down and the
	// renewal sent again on a new one.
	BugSilenceFromLastAnswer = "client-silence-from-last-answer"
)
