package demo

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencekv"
)

// Event is one line a worker prints on its stdout, prefixed by EventPrefix,
// for the orchestrator's timeline.
type Event struct {
	Who     string `json:"who"`
	What    string `json:"what"`
	Token   uint64 `json:"token,omitempty"`
	Highest uint64 `json:"highest,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// EventPrefix starts every event line of a worker.
const EventPrefix = "EVENT "

// Worker events, in the order they can happen.
const (
	EvAcquired = "acquired" // Token, Detail: time left
	EvChecked  = "checked"  // the lease check before the write passed; Detail: time left
	EvFreezing = "freezing" // about to SIGSTOP itself
	EvResumed  = "resumed"  // running again after SIGCONT
	EvAccepted = "accepted" // the write stuck
	EvRejected = "rejected" // the write was refused as stale; Highest
	EvReleased = "released"
	EvFailed   = "failed" // Detail: the error
)

// workerConfig is one worker run: acquire, (freeze), write, release.
type workerConfig struct {
	name, resource, kvURL, value string
	endpoints                    []string
	ttl                          time.Duration
	wait, freeze                 bool
}

// runWorker is "fencedemo worker": a lease holder that does what a careful
// worker does: it acquires a lease, checks before writing that its lease is
// still safe, then writes with its fencing token. With --freeze-before-write
// it stops itself with a real SIGSTOP between that check and the write, the
// moment a GC pause or a VM suspend does the most harm; the orchestrator
// resumes it with SIGCONT.
func runWorker(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fencedemo worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c workerConfig
	var endpoints string
	fs.StringVar(&c.name, "name", "worker", "holder name")
	fs.StringVar(&endpoints, "endpoints", "", "comma-separated leased addresses")
	fs.StringVar(&c.resource, "resource", "account/7", "resource to lease; also the fencedkv key")
	fs.StringVar(&c.kvURL, "kv", "", "fencedkv base URL")
	fs.StringVar(&c.value, "value", "", "value to write")
	fs.DurationVar(&c.ttl, "ttl", 2*time.Second, "lease ttl")
	fs.BoolVar(&c.wait, "wait", false, "queue for the lease until it is free")
	fs.BoolVar(&c.freeze, "freeze-before-write", false, "SIGSTOP itself after the lease check, before the write")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c.endpoints = strings.Split(endpoints, ",")
	emit := func(e Event) {
		e.Who = c.name
		b, _ := json.Marshal(e)
		fmt.Fprintf(stdout, "%s%s\n", EventPrefix, b)
	}
	if err := c.run(emit); err != nil {
		emit(Event{What: EvFailed, Detail: err.Error()})
		return 1
	}
	return 0
}

func (c workerConfig) run(emit func(Event)) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leases, err := client.Dial(ctx, c.endpoints...)
	if err != nil {
		return err
	}
	defer leases.Close()
	opts := []client.AcquireOption{client.WithTTL(c.ttl), client.WithHolder(c.name)}
	if c.wait {
		opts = append(opts, client.WithWait())
	}
	lease, err := leases.Acquire(ctx, c.resource, opts...)
	if err != nil {
		return err
	}
	tok := fence.TokenOf(lease)
	emit(Event{What: EvAcquired, Token: tok.Value, Detail: until(lease.SafeUntil())})

	// The careful part: never write on a lease that may have run out.
	if err := lease.Err(); err != nil {
		return fmt.Errorf("lease ended before the write: %w", err)
	}
	emit(Event{What: EvChecked, Token: tok.Value, Detail: until(lease.SafeUntil())})
	if c.freeze {
		emit(Event{What: EvFreezing, Token: tok.Value})
		frozen := time.Now()
		if err := stopSelf(); err != nil {
			return fmt.Errorf("SIGSTOP: %w", err)
		}
		// Execution continues here after SIGCONT, with the check above
		// long out of date: exactly what a paused holder experiences.
		emit(Event{What: EvResumed, Token: tok.Value, Detail: time.Since(frozen).Round(10 * time.Millisecond).String()})
	}

	kv := &fencekv.Client{BaseURL: c.kvURL}
	_, err = kv.Put(ctx, c.resource, tok, []byte(c.value))
	var stale *fence.StaleTokenError
	switch {
	case errors.As(err, &stale):
		emit(Event{What: EvRejected, Token: tok.Value, Highest: stale.Highest})
	case err != nil:
		return err
	default:
		emit(Event{What: EvAccepted, Token: tok.Value, Detail: c.value})
	}
	live := lease.Err() == nil
	if err := lease.Release(ctx); err == nil && live {
		emit(Event{What: EvReleased, Token: tok.Value})
	}
	return nil
}

// stopSelf stops the whole process with SIGSTOP before returning. The
// signal goes to the calling thread (tgkill), which takes it on its way out
// of the system call: a process-directed kill could be taken by another
// thread while this one ran on for a moment, into the write.
func stopSelf() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}

func until(t time.Time) string {
	d := time.Until(t)
	if d < 0 {
		return "none left"
	}
	return d.Round(10*time.Millisecond).String() + " left"
}
