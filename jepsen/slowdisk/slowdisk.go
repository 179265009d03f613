// Package slowdisk is the harness's slow disk: a loopback FUSE file
// system over a directory of the real disk, whose fsyncs can be made to
// wait before they reach it, as CharybdeFS does for Jepsen. The nodes run
// their unmodified binary on it: every write, read and fsync goes to the
// backing directory through the kernel, and only the chosen nodes' fsyncs
// (fsync and fdatasync of files under their data dirs) are held while the
// fault lasts. A disk that takes a second or more to make a write durable
// is what a stalled SAN, a saturated cloud volume or a dying drive looks
// like: the node is alive and answers, its commits are late.
//
// The harness process serves the file system; it needs root and
// /dev/fuse (go-fuse calls mount(2) itself, falling back to fusermount).
package slowdisk

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Disk is a mounted slow disk.
type Disk struct {
	mountpoint string
	server     *fuse.Server

	mu    sync.Mutex
	delay time.Duration
	dirs  map[string]bool // top-level dirs whose files' fsyncs wait

	delayed atomic.Int64 // fsyncs held so far
}

// Available reports why a slow disk cannot be mounted here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the slow disk needs root (a FUSE mount)")
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("the slow disk needs /dev/fuse: %w", err)
	}
	return f.Close()
}

// Mount mounts a slow disk at mountpoint over backing (both existing
// directories; mountpoint should be empty: what it holds is hidden while
// mounted). Nothing is slow until Slow.
func Mount(mountpoint, backing string) (*Disk, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, err
	}
	d := &Disk{mountpoint: mountpoint}
	top := &node{LoopbackNode: root.(*fs.LoopbackNode), d: d}
	root.(*fs.LoopbackNode).RootData.RootNode = top
	cache := time.Second
	srv, err := fs.Mount(mountpoint, top, &fs.Options{
		EntryTimeout: &cache, AttrTimeout: &cache,
		MountOptions: fuse.MountOptions{FsName: backing, Name: "leasefence-slowdisk", DirectMount: true, MaxBackground: 64},
	})
	if err != nil {
		return nil, fmt.Errorf("mount a slow disk at %s: %w", mountpoint, err)
	}
	d.server = srv
	return d, nil
}

// Slow makes every fsync of a file under the top-level directories dirs
// wait delay before it reaches the disk; Slow(0) heals. It returns at
// once; an fsync already waiting keeps its delay.
func (d *Disk) Slow(delay time.Duration, dirs ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.delay, d.dirs = delay, map[string]bool{}
	for _, x := range dirs {
		d.dirs[x] = true
	}
}

// Delayed counts the fsyncs held so far.
func (d *Disk) Delayed() int64 { return d.delayed.Load() }

// Unmount heals and unmounts (lazily, should a node still hold a file:
// the processes on it must be stopped first for their data to be whole).
func (d *Disk) Unmount() error {
	d.Slow(0)
	err := d.server.Unmount()
	if err != nil {
		if lerr := syscall.Unmount(d.mountpoint, syscall.MNT_DETACH); lerr == nil {
			err = nil
		}
	}
	return err
}

// delayFor is how long an fsync of the file at path (relative to the
// mount) waits.
func (d *Disk) delayFor(path string) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.delay <= 0 {
		return 0
	}
	top, _, _ := strings.Cut(path, "/")
	if !d.dirs[top] {
		return 0
	}
	return d.delay
}

// node is a loopback node whose fsyncs may wait; its children are too.
type node struct {
	*fs.LoopbackNode
	d *Disk
}

var (
	_ fs.NodeWrapChilder = (*node)(nil)
	_ fs.NodeFsyncer     = (*node)(nil)
)

func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if l, ok := ops.(*fs.LoopbackNode); ok {
		return &node{LoopbackNode: l, d: n.d}
	}
	return ops
}

// Fsync holds the fsync (fsync and fdatasync alike) of a slowed node's
// file, then passes it on to the backing file.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if wait := n.d.delayFor(n.EmbeddedInode().Path(nil)); wait > 0 {
		n.d.delayed.Add(1)
		time.Sleep(wait)
	}
	if ff, ok := f.(fs.FileFsyncer); ok {
		return ff.Fsync(ctx, flags)
	}
	return syscall.ENOTSUP
}
