package cluster

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
	"runtime/debug"
)

// guardDisk runs f, which reads the data dir, and turns a panic (bbolt
// asserts on a damaged page, raft panics on a missing log entry) or a
// fault on a memory-mapped page of a truncated file into an error naming
// what was read. Nothing read from disk may bring the process down with a
// stack trace instead of a message.
func guardDisk(what string, f func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("cluster: %s is damaged (%v): this node cannot trust its data dir; "+
				"replace it: remove it from the cluster, empty the data dir and start it with --join "+
				"(docs/OPERATIONS.md, Replacing a dead node)", what, p)
		}
	}()
	return f()
}

// checkBoltFile checks what bbolt would trust blindly when it opens path:
// a valid meta page (magic, version, checksum) and a file long enough to
// hold every page that meta page counts. A raft.db cut short (truncate,
// a full disk, a bad copy) otherwise ends in a bbolt assertion panic, or
// in a fault on a page mapped past the end of the file. An empty file is
// left to the caller (bbolt would write a new database into it).
func checkBoltFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	size := fi.Size()
	const (
		pageHeader = 16
		metaLen    = 64 // through the checksum
		boltMagic  = 0xED0CDAED
		boltFormat = 2
	)
	// Page 0 tells the page size; page 1 sits one page further.
	var best struct {
		ok         bool
		pageSize   uint32
		pgid, txid uint64
		problem    string
	}
	readMeta := func(off int64) {
		buf := make([]byte, pageHeader+metaLen)
		if _, err := f.ReadAt(buf, off); err != nil {
			best.problem = fmt.Sprintf("meta page at offset %d unreadable: %v", off, err)
			return
		}
		m := buf[pageHeader:]
		le := binary.LittleEndian
		h := fnv.New64a()
		h.Write(m[:56])
		switch {
		case le.Uint32(m[0:]) != boltMagic:
			best.problem = fmt.Sprintf("meta page at offset %d: not a bbolt page", off)
		case le.Uint32(m[4:]) != boltFormat:
			best.problem = fmt.Sprintf("meta page at offset %d: bbolt format %d", off, le.Uint32(m[4:]))
		case le.Uint64(m[56:]) != h.Sum64():
			best.problem = fmt.Sprintf("meta page at offset %d: checksum mismatch", off)
		default:
			if txid := le.Uint64(m[48:]); !best.ok || txid > best.txid {
				best.ok, best.txid = true, txid
				best.pageSize, best.pgid = le.Uint32(m[8:]), le.Uint64(m[40:])
			}
		}
	}
	readMeta(0)
	second := int64(os.Getpagesize())
	if best.ok {
		second = int64(best.pageSize)
	}
	readMeta(second)
	if !best.ok {
		return fmt.Errorf("cluster: %s (%d bytes) is not a readable bbolt file (%s)", path, size, best.problem)
	}
	if best.pageSize < 512 || best.pageSize > 1<<20 {
		return fmt.Errorf("cluster: %s: implausible page size %d", path, best.pageSize)
	}
	if need := int64(best.pgid) * int64(best.pageSize); size < need {
		return fmt.Errorf("cluster: %s is truncated: %d bytes, but its pages reach %d", path, size, need)
	}
	return nil
}
