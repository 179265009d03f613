// Package report writes what a person reads of a run: report.html, the
// plots, porcupine's linearizability.html and the soak table. It imports
// jepsen/checker and jepsen/history of the harness; it takes a Run (the
// headline and verdicts) rather than the top-level Summary. See
// jepsen/README.md, "Artifacts".
package report
