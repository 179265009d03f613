// Package checker holds the harness's checkers: each reads a run's
// history (history.Record, history.Fault, history.ProbeSample, fencedkv's
// audit) and returns a Result, valid, invalid with a witness, or unknown.
// It imports only jepsen/history of the harness; what gathers a checker's
// input (probers, convergence polls) is the top-level package's. See
// jepsen/README.md, "Checkers".
package checker
