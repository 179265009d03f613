// Package overload asks real leased processes for more renewals than they
// can commit and reports what that cost: leader changes, live leases lost,
// renewals refused (and retried) and renewals served. It is the overload
// row of docs/PERFORMANCE.md (issue #16, "Overload without collapse").
//
// It runs only when -overload.bins names the binaries to compare, e.g.
//
//	go test ./bench/overload -run '^$' -bench Overload -benchtime 1x -timeout 60m \
//	  -overload.bins main=/tmp/main-bin/leased,new=/tmp/new-bin/leased \
//	  -overload.leases 20000 -overload.rate 40000 -overload.window 2m
//
// Each binary gets a fresh 3-node cluster on loopback (bootstrapped by
// internal/testcluster, --log-level warn), the same leases, clients and
// asked rate, one after the other, -overload.rounds times (alternating).
// The Go client is this tree's for every binary: it backs off when a node
// refuses for overload and behaves as before when none does.
package overload

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/internal/testcluster"
)

var (
	bins    = flag.String("overload.bins", "", "name=path-to-leased[+flag...],... binaries to compare, each with leased flags of its own after '+' (empty: skip)")
	leases  = flag.Int("overload.leases", 20000, "live leases kept alive")
	rate    = flag.Float64("overload.rate", 40000, "renewals/s asked for (sets the keep-alive interval: leases/rate)")
	ttl     = flag.Duration("overload.ttl", 30*time.Second, "lease ttl")
	window  = flag.Duration("overload.window", time.Minute, "measured window")
	clients = flag.Int("overload.clients", 4, "client instances (one keep-alive stream each) the leases are spread over")
	rounds  = flag.Int("overload.rounds", 1, "rounds; each runs every binary once, in alternating order")
	extra   = flag.String("overload.flags", "--log-level=warn", "extra leased flags, space separated")
)

func BenchmarkOverload(b *testing.B) {
	if *bins == "" {
		b.Skip("set -overload.bins name=path,...")
	}
	type bin struct {
		name, path string
		flags      []string
	}
	var list []bin
	for _, kv := range strings.Split(*bins, ",") {
		name, path, ok := strings.Cut(kv, "=")
		if !ok {
			b.Fatalf("bad -overload.bins entry %q", kv)
		}
		parts := strings.Split(path, "+")
		list = append(list, bin{name, parts[0], parts[1:]})
	}
	for r := 0; r < *rounds; r++ {
		for i := range list {
			bn := list[i]
			if r%2 == 1 {
				bn = list[len(list)-1-i]
			}
			b.Run(fmt.Sprintf("%s/round%d", bn.name, r+1), func(b *testing.B) {
				res := runOverload(b, bn.path, bn.flags)
				b.ReportMetric(float64(res.elections), "leader-changes")
				b.ReportMetric(float64(res.lost), "leases-lost")
				b.ReportMetric(float64(res.deferred), "renewals-refused")
				b.ReportMetric(res.served, "renewals/s")
				b.ReportMetric(res.asked, "asked/s")
				b.ReportMetric(float64(res.grantRetries), "acquires-refused")
				b.Logf("%s: leases %d, asked %.0f/s, served %.0f/s, refused (and retried) %d, leader changes %d, live leases lost %d (%v)",
					bn.name, *leases, res.asked, res.served, res.deferred, res.elections, res.lost, res.lostWhy)
				if res.elections > 0 || res.lost > 0 {
					// The goal is none of either: fail, which also prints
					// the tail of every node's log (why leaders changed).
					b.Errorf("%s: %d leader changes and %d live leases lost; want none", bn.name, res.elections, res.lost)
				}
			})
		}
	}
}

type result struct {
	asked, served float64
	deferred      uint64
	elections     int
	lost          int
	lostWhy       map[string]int
	grantRetries  int
}

func runOverload(b *testing.B, bin string, flags []string) result {
	c := testcluster.Start(b, bin, 3, append(strings.Fields(*extra), flags...)...)
	interval := time.Duration(float64(time.Second) * float64(*leases) / *rate)
	var cls []*client.Client
	for i := 0; i < *clients; i++ {
		cl, err := client.New(client.Config{Endpoints: c.Endpoints(), KeepAliveInterval: interval})
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		cls = append(cls, cl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	// Take the leases (64 workers), then let the keep-alive settle.
	ls := make([]*client.Lease, *leases)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		firstEr error
		retries int
	)
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < *leases; i += 64 {
				for {
					l, err := cls[i%len(cls)].Acquire(ctx, fmt.Sprintf("ov/%d", i), client.WithTTL(*ttl))
					if errors.Is(err, client.ErrOverloaded) {
						mu.Lock()
						retries++
						mu.Unlock()
						continue
					}
					if err != nil {
						mu.Lock()
						firstEr = err
						mu.Unlock()
						return
					}
					ls[i] = l
					break
				}
			}
		}(w)
	}
	wg.Wait()
	if firstEr != nil {
		b.Fatalf("taking the leases: %v", firstEr)
	}
	time.Sleep(min(*ttl/2, 10*time.Second))

	// Watch every node's term while the window runs: any rise is an
	// election.
	terms := func() uint64 {
		var top uint64
		for i := range c.Procs {
			if st, err := c.Status(i); err == nil {
				top = max(top, st.Term)
			}
		}
		return top
	}
	term0 := terms()
	stats := func() (conf, def uint64) {
		for _, cl := range cls {
			s := cl.Stats()
			conf += s.RenewalsConfirmed
			def += s.RenewalsDeferred
		}
		return
	}
	lostBefore := 0
	for _, l := range ls {
		if l.Err() != nil {
			lostBefore++
		}
	}
	if lostBefore > 0 {
		b.Logf("%d leases already lost before the window", lostBefore)
	}
	conf0, def0 := stats()
	start := time.Now()
	var topTerm uint64 = term0
	for time.Since(start) < *window {
		time.Sleep(250 * time.Millisecond)
		topTerm = max(topTerm, terms())
	}
	el := time.Since(start).Seconds()
	conf1, def1 := stats()
	topTerm = max(topTerm, terms())
	res := result{
		asked:        *rate,
		served:       float64(conf1-conf0) / el,
		deferred:     def1 - def0,
		elections:    int(topTerm - term0),
		lostWhy:      map[string]int{},
		grantRetries: retries,
	}
	for _, l := range ls {
		if err := l.Err(); err != nil {
			res.lost++
			res.lostWhy[shortErr(err)]++
		}
	}
	// Release what is left (best effort), so the next run starts clean.
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	var rw sync.WaitGroup
	for w := 0; w < 32; w++ {
		rw.Add(1)
		go func(w int) {
			defer rw.Done()
			for i := w; i < len(ls); i += 32 {
				if ls[i].Err() == nil {
					_ = ls[i].Release(rctx)
				}
			}
		}(w)
	}
	rw.Wait()
	return res
}

func shortErr(err error) string {
	switch {
	case errors.Is(err, client.ErrSafeDeadline):
		return "safe-deadline"
	case errors.Is(err, client.ErrLeaseLost):
		return "lost"
	}
	return err.Error()
}
