// Package memlimit chooses the Go runtime's soft memory limit for leased.
//
// A node's memory is mostly its live leases, and the garbage collector,
// left alone (GOGC=100), lets the heap grow to twice what was live after
// the last collection. A node given a memory budget by its cgroup (a
// container's limit, a systemd MemoryMax) should collect harder as it
// nears that budget instead of being killed by the kernel. So by default
// ("auto") leased sets the runtime's limit to 90% of the cgroup's, as
// Prometheus's --auto-gomemlimit does; GOMEMLIMIT in the environment, or
// an explicit --memory-limit, wins.
package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Ratio is the share of the cgroup's limit that "auto" gives the runtime:
// the rest is for what the runtime does not count (thread stacks outside
// the heap, the mmap of the raft log, page cache charged to the cgroup).
const Ratio = 0.9

// Choice is the limit chosen and where it came from.
type Choice struct {
	Bytes  int64  // 0: no limit set by leased
	Source string // "flag", "GOMEMLIMIT", "cgroup", or "none"
	Cgroup int64  // the cgroup's limit, 0 when none was found
}

func (c Choice) String() string {
	switch c.Source {
	case "none":
		return "none (no cgroup memory limit found; set --memory-limit or GOMEMLIMIT)"
	case "GOMEMLIMIT":
		return "set by GOMEMLIMIT"
	case "cgroup":
		return fmt.Sprintf("%s (%.0f%% of the cgroup's %s)", FormatSize(c.Bytes), Ratio*100, FormatSize(c.Cgroup))
	}
	return FormatSize(c.Bytes)
}

// Choose decides the limit for the flag value flag ("auto", "off", or a
// size as ParseSize reads it). env is GOMEMLIMIT's value ("" when unset);
// root is "/" outside tests.
func Choose(flag, env, root string) (Choice, error) {
	switch flag {
	case "off":
		return Choice{Source: "none"}, nil
	case "", "auto":
	default:
		n, err := ParseSize(flag)
		if err != nil {
			return Choice{}, fmt.Errorf("--memory-limit: %w", err)
		}
		if n <= 0 {
			return Choice{}, fmt.Errorf("--memory-limit: %q must be above zero (or \"off\")", flag)
		}
		return Choice{Bytes: n, Source: "flag"}, nil
	}
	if env != "" {
		return Choice{Source: "GOMEMLIMIT"}, nil
	}
	cg, err := CgroupLimit(root)
	if err != nil || cg == 0 {
		// A host without cgroups, or one we cannot read: no limit,
		// as before this package existed.
		return Choice{Source: "none"}, nil
	}
	return Choice{Bytes: int64(float64(cg) * Ratio), Source: "cgroup", Cgroup: cg}, nil
}

// CgroupLimit returns the memory limit that applies to this process: the
// smallest limit of its cgroup and the cgroup's ancestors, under cgroup
// v2 (memory.max) or v1 (memory.limit_in_bytes). 0 means no limit.
func CgroupLimit(root string) (int64, error) {
	self, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0, err
	}
	mounts, err := os.ReadFile(filepath.Join(root, "proc/self/mountinfo"))
	if err != nil {
		return 0, err
	}
	var best int64
	for _, m := range parseMounts(mounts) {
		path, ok := cgroupPath(self, m)
		if !ok {
			continue
		}
		file := "memory.limit_in_bytes"
		if m.v2 {
			file = "memory.max"
		}
		// The process's own cgroup, then each ancestor up to the mount.
		rel, err := filepath.Rel(m.root, path)
		if err != nil || strings.HasPrefix(rel, "..") {
			rel = "." // our cgroup is outside the mount's view: read its top
		}
		dir := filepath.Join(root, m.point, rel)
		top := filepath.Join(root, m.point)
		for {
			if n, ok := readLimit(filepath.Join(dir, file)); ok && (best == 0 || n < best) {
				best = n
			}
			if dir == top || !strings.HasPrefix(dir, top) {
				break
			}
			dir = filepath.Dir(dir)
		}
	}
	return best, nil
}

type mount struct {
	root, point string
	v2          bool
}

// parseMounts returns the cgroup v2 mounts and the v1 mounts of the memory
// controller from /proc/self/mountinfo.
func parseMounts(b []byte) []mount {
	var out []mount
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// id parent major:minor root point options [optional...] - fstype source superopts
		f := strings.Fields(sc.Text())
		sep := -1
		for i, s := range f {
			if s == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+3 > len(f) {
			continue
		}
		switch fstype := f[sep+1]; {
		case fstype == "cgroup2":
			out = append(out, mount{root: f[3], point: f[4], v2: true})
		case fstype == "cgroup" && hasOption(f[sep+3], "memory"):
			out = append(out, mount{root: f[3], point: f[4]})
		}
	}
	return out
}

func hasOption(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// cgroupPath finds, in /proc/self/cgroup, this process's path in the
// hierarchy mounted at m.
func cgroupPath(self []byte, m mount) (string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(self))
	for sc.Scan() {
		// hierarchy-id:controllers:path
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		if m.v2 && f[0] == "0" && f[1] == "" {
			return f[2], true
		}
		if !m.v2 && hasOption(f[1], "memory") {
			return f[2], true
		}
	}
	return "", false
}

// readLimit reads one limit file: "max" (v2) and v1's near-2^63 value
// mean no limit.
func readLimit(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= math.MaxInt64/2 {
		return 0, false
	}
	return n, true
}

var units = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// ParseSize reads a byte count: a whole number with an optional unit, B,
// KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024),
// as GOMEMLIMIT spells them.
func ParseSize(s string) (int64, error) {
	num, mult := s, int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (a whole number with an optional unit: 512MiB, 1GiB, 800MB)", s)
	}
	if n > math.MaxInt64/mult {
		return 0, errors.New("size " + strconv.Quote(s) + " is too large")
	}
	return n * mult, nil
}

// FormatSize prints n bytes in MiB or GiB.
func FormatSize(n int64) string {
	if n >= 10<<30 {
		return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%dMiB", n>>20)
}
