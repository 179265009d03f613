// Package fence is the resource side of leasefence: it decides which effect
// may stick.
//
// A lease answers who may act now; it cannot stop a holder that was paused
// or cut off from acting later. Every grant therefore carries a fencing
// token that strictly increases per scope, and the protected resource keeps,
// durably, the highest token it has accepted per scope and refuses older
// ones. The comparison, the effect and the new highest must be one atomic
// operation; a read followed by an unchecked write lets a stale holder in
// through the gap.
//
// This package holds what every guard shares: the [Token], the acceptance
// [Rule], the [Guard] interface, the typed [StaleTokenError], the wire
// format of tokens, and [Memory], an in-process guard. Durable guards live
// in subpackages:
//
//   - fencebolt: the check, the effect and the record in one bbolt transaction.
//   - fencesql: one conditional statement inside the caller's database/sql
//     transaction (PostgreSQL and SQLite).
//
// and the transport glue in fencegrpc (metadata fencing-scope and
// fencing-token, status FailedPrecondition with reason STALE_TOKEN) and
// fencehttp (header "Fencing-Token: <scope>=<token>", status 409).
package fence
