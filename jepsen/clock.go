package jepsen

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	nm "github.com/leasefence/leasefence/jepsen/nemesis"
)

// ClockFile is the name of a node's fault clock control file in its data
// dir.
const ClockFile = "fault-clock.json"

// UsesClock reports whether any of these nemeses needs the fault clock.
func UsesClock(nemeses []string) bool {
	for _, k := range nemeses {
		if strings.HasPrefix(k, "clock-") {
			return true
		}
	}
	return false
}

// ClockArgs are the extra leased arguments that turn on the fault clock,
// with each node's control file in its data dir under dir (StartCluster
// replaces {id} by the node's id).
func ClockArgs(dir string) []string {
	return []string{"--unsafe-fault-clock", filepath.Join(dir, "{id}", ClockFile)}
}

// fileClocks is nemesis.ClockControl over the control files of a Cluster's nodes
// (written atomically: a temporary file renamed over the old one) and
// their Status.
type fileClocks struct {
	c   *Cluster
	dir string
}

var _ nm.ClockControl = fileClocks{}

type clockControlFile struct {
	Rate         float64 `json:"rate"`
	WallOffsetNs int64   `json:"wall_offset_ns"`
}

func (f fileClocks) SetClock(id string, rate float64, wallOffset time.Duration) error {
	b, err := json.Marshal(clockControlFile{Rate: rate, WallOffsetNs: int64(wallOffset)})
	if err != nil {
		return err
	}
	d := filepath.Join(f.dir, id)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(d, ClockFile+".tmp*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(d, ClockFile))
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

func (f fileClocks) ClockStatus(ctx context.Context, id string) (float64, time.Duration, error) {
	st, err := f.c.Status(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	fc := st.GetFaultClock()
	if fc == nil {
		return 0, 0, fmt.Errorf("%s runs without the fault clock (unsafe %v)", id, st.GetUnsafe())
	}
	return fc.GetRate(), time.Duration(fc.GetWallOffsetNs()), nil
}
