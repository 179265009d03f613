// Package jepsen is leasefence's fault-injection harness: it runs real
// leased nodes, a real fencedkv and real worker processes on loopback,
// injects faults on a seeded schedule, records every invocation and
// completion in a history, and checks the properties of DESIGN.md ("What is
// checked") with independent checkers over that history. The record of a run is
// jepsen/history, the checkers jepsen/checker, report.html and the plots
// jepsen/report, the faults jepsen/nemesis; this package runs the
// processes, the workloads and the nemeses over them (README.md, "Layout").
package jepsen
