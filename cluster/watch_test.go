package cluster

import (
	"testing"

	"github.com/leasefence/leasefence/fsm"
)

func applied(resource string, n int) *fsm.Applied {
	a := &fsm.Applied{}
	for i := 0; i < n; i++ {
		a.Events = append(a.Events, fsm.Event{Type: fsm.EventGranted, Lease: fsm.Lease{Resource: resource, Token: uint64(i + 1)}})
	}
	return a
}

// A snapshot restore replaces state: connected watchers have missed the
// entries it covers, so they are cut, and resuming from before it is
// refused instead of silently skipping events.
func TestSnapshotRestoreCutsWatchersAndRefusesStaleResumes(t *testing.T) {
	h := newHub(64)
	if _, _, ok := h.subscribe("r", false, &position{}); ok {
		t.Fatal("a resume before the first apply must be refused: the node cannot know what it missed")
	}
	h.publish(10, applied("r", 1))
	w, _, ok := h.subscribe("r", false, &position{10, 0})
	if !ok {
		t.Fatal("resume at a retained position refused")
	}
	h.reset(50)
	select {
	case <-w.overflow:
	default:
		t.Fatal("a connected watcher was not cut by the restore")
	}
	if _, _, ok := h.subscribe("r", false, &position{10, 0}); ok {
		t.Fatal("resume from before the restored snapshot was accepted")
	}
	if _, _, ok := h.subscribe("r", false, &position{50, ^uint32(0)}); !ok {
		t.Fatal("resume from the snapshot's index refused")
	}
	h.publish(51, applied("r", 2))
	_, backlog, ok := h.subscribe("r", false, &position{50, ^uint32(0)})
	if !ok || len(backlog) != 2 || backlog[0].Position.Index != 51 {
		t.Fatalf("backlog after restore: %v %v", backlog, ok)
	}
}

// A node that started without a snapshot rebuilt its state from the start
// of the log: its first event-bearing entry may come at any index, and a
// resume from the very beginning (a position pinned on a node that had
// applied nothing) loses nothing there. It was refused as OutOfRange on
// every node, which ended the client's watch (seen in CI under load).
func TestFirstApplyWithoutRestoreLosesNothing(t *testing.T) {
	h := newHub(64)
	h.publish(3, applied("r", 1))
	_, backlog, ok := h.subscribe("r", false, &position{0, ^uint32(0)})
	if !ok || len(backlog) != 1 || backlog[0].Position.Index != 3 {
		t.Fatalf("resume from the start: %v %v", backlog, ok)
	}
}

func TestWatcherThatFallsBehindIsCutNotWaitedFor(t *testing.T) {
	h := newHub(1024)
	h.subBuf = 4
	w, _, _ := h.subscribe("r", false, nil)
	h.publish(1, applied("r", 10)) // must not block
	select {
	case <-w.overflow:
	default:
		t.Fatal("slow watcher not cut")
	}
	// Evicting from the ring moves the lost position forward.
	small := newHub(16)
	small.publish(1, applied("r", 20))
	if _, _, ok := small.subscribe("r", false, &position{1, 0}); ok {
		t.Fatal("resume from an evicted position accepted")
	}
	if _, backlog, ok := small.subscribe("r", false, &position{1, 3}); !ok || len(backlog) != 16 {
		t.Fatalf("resume at the oldest retained position: %d events, ok=%v", len(backlog), ok)
	}
}
