package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// FaultClockPoll is how often a node started with a fault clock reads its
// control file.
const FaultClockPoll = 50 * time.Millisecond

// MaxFaultClockRate bounds the rate a control file may set.
const MaxFaultClockRate = 100

// FaultClockControl is the JSON control file of a FaultClock:
//
//	{"rate": 1.0, "wall_offset_ns": 0}
//
// Rate scales the monotonic clock (1 is the real rate; it must lie in
// [0, MaxFaultClockRate]; a missing rate means 1). WallOffsetNs is added to
// the system wall clock by Wall.
type FaultClockControl struct {
	Rate         *float64 `json:"rate,omitempty"`
	WallOffsetNs int64    `json:"wall_offset_ns"`
}

// FaultClock is an unsafe fault-injection clock, for the jepsen harness
// only (leased --unsafe-fault-clock; Status lists "fault-clock" in
// unsafe). It is a Clock whose monotonic reading runs at a settable rate,
// and it offers a wall reading with a settable offset.
//
// Contract: Now never runs backwards. A rate change takes effect from the
// reading at the moment of the change (reading = reading at the last change
// + real elapsed since it × rate), so the reading is continuous. Rate 1
// and offset 0 make it the system clock (up to its origin). Wall is
// time.Now() plus the offset; nothing in the node reads it for lease
// decisions (DESIGN.md: wall clocks are not trusted), it exists so that a
// planted bug can misuse it. All methods are safe for concurrent use.
type FaultClock struct {
	log  hclog.Logger
	path string
	real Clock

	mu         sync.Mutex
	mark       time.Duration // reading at the last rate change
	realMark   time.Duration // real reading at the last rate change
	rate       float64
	wallOffset time.Duration
	last       time.Duration // highest reading returned (never go back)
	lastFile   []byte        // content last acted on (or logged as bad)
	lastErr    string        // last read error logged
}

// NewFaultClock returns a FaultClock at rate 1 and offset 0, controlled by
// the JSON file at path (see FaultClockControl; Poll reads it). log may be
// nil.
func NewFaultClock(path string, log hclog.Logger) *FaultClock {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &FaultClock{log: log, path: path, real: SystemClock(), rate: 1}
}

// Now implements Clock: the scaled monotonic reading.
func (c *FaultClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

func (c *FaultClock) nowLocked() time.Duration {
	v := c.mark + time.Duration(float64(c.real.Now()-c.realMark)*c.rate)
	if v < c.last {
		v = c.last // float rounding at a rate change must not step back
	}
	c.last = v
	return v
}

// Wall returns the system wall clock plus the current offset.
func (c *FaultClock) Wall() time.Time {
	c.mu.Lock()
	off := c.wallOffset
	c.mu.Unlock()
	return time.Now().Add(off)
}

// Rate returns the current rate of the monotonic reading.
func (c *FaultClock) Rate() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rate
}

// WallOffset returns the current offset of Wall.
func (c *FaultClock) WallOffset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wallOffset
}

// Set changes the rate and the wall offset. A rate outside
// [0, MaxFaultClockRate] (or NaN) is refused and nothing changes.
func (c *FaultClock) Set(rate float64, wallOffset time.Duration) error {
	if math.IsNaN(rate) || rate < 0 || rate > MaxFaultClockRate {
		return fmt.Errorf("cluster: fault clock rate %g outside [0, %d]", rate, MaxFaultClockRate)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rate != c.rate {
		c.mark = c.nowLocked()
		c.realMark = c.real.Now()
		c.rate = rate
	}
	c.wallOffset = wallOffset
	return nil
}

// Poll reads the control file once and applies it when its content
// changed. A missing file changes nothing. A file that cannot be read or
// parsed, or that sets a bad rate, is logged (once per distinct content)
// and ignored: the clock keeps its settings. Poll never panics on input.
func (c *FaultClock) Poll() {
	b, err := os.ReadFile(c.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		if msg := err.Error(); msg != c.lastErrMsg() {
			c.setLastErr(msg)
			c.log.Warn("fault clock control file unreadable; ignored", "path", c.path, "error", err)
		}
		return
	}
	c.mu.Lock()
	same := c.lastFile != nil && bytes.Equal(b, c.lastFile)
	c.lastFile = b
	c.lastErr = ""
	c.mu.Unlock()
	if same {
		return
	}
	ctl, err := ParseFaultClockControl(b)
	if err == nil {
		err = c.Set(*ctl.Rate, time.Duration(ctl.WallOffsetNs))
	}
	if err != nil {
		c.log.Warn("bad fault clock control file; ignored", "path", c.path, "error", err)
		return
	}
	c.log.Warn("fault clock set", "rate", *ctl.Rate, "wall-offset", time.Duration(ctl.WallOffsetNs))
}

func (c *FaultClock) lastErrMsg() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

func (c *FaultClock) setLastErr(msg string) {
	c.mu.Lock()
	c.lastErr = msg
	c.lastFile = nil
	c.mu.Unlock()
}

// ParseFaultClockControl decodes a control file (unknown fields refused, a
// missing rate becomes 1) and checks the rate.
func ParseFaultClockControl(b []byte) (FaultClockControl, error) {
	var ctl FaultClockControl
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ctl); err != nil {
		return ctl, fmt.Errorf("cluster: fault clock control: %w", err)
	}
	if dec.More() {
		return ctl, errors.New("cluster: fault clock control: trailing data")
	}
	if ctl.Rate == nil {
		one := 1.0
		ctl.Rate = &one
	}
	if r := *ctl.Rate; math.IsNaN(r) || r < 0 || r > MaxFaultClockRate {
		return ctl, fmt.Errorf("cluster: fault clock control: rate %g outside [0, %d]", r, MaxFaultClockRate)
	}
	return ctl, nil
}

// Run polls the control file every interval until stop is closed.
func (c *FaultClock) Run(stop <-chan struct{}, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			c.Poll()
		}
	}
}
