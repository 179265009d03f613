package checker

import (
	"bufio"
	"bytes"
	"sort"
)

// NameNoPanics is CheckNoPanics's name.
const NameNoPanics = "processes-never-panic"

// AnomalyPanicked: a process of the run (a node, fencedkv, a worker)
// crashed with a Go panic or a fatal runtime error.
const AnomalyPanicked = "panicked"

// CheckNoPanics reads the logs of every process of the run (name → the
// log's content, stderr included) and is invalid for each that holds a Go
// panic ("panic: " at the start of a line) or a fatal runtime error
// ("fatal error: "). No input from the network or the disk may crash a
// process; the nemeses kill processes with signals, which print neither.
// A crash that leaves the cluster serving is invisible to the other
// checkers (the node is replaced or restarted), so this one looks.
func CheckNoPanics(logs map[string][]byte) Result {
	f := NewFinding(NameNoPanics)
	names := make([]string, 0, len(logs))
	for name := range logs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f.R.Checked++
		sc := bufio.NewScanner(bytes.NewReader(logs[name]))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for line := 1; sc.Scan(); line++ {
			l := sc.Bytes()
			if bytes.HasPrefix(l, []byte("panic: ")) || bytes.HasPrefix(l, []byte("fatal error: ")) {
				f.Invalid(AnomalyPanicked, "%s, line %d: %s", name, line, Shorten(string(l), 160))
				break
			}
		}
		if err := sc.Err(); err != nil {
			f.Unknown("%s could not be read to its end: %v", name, err)
		}
	}
	return f.Done("process log")
}

// Shorten cuts s to at most n runes, marking the cut with "…" (a
// witness, a label: never inside a character).
func Shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
