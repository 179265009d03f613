package cluster

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/leasefence/leasefence/fsm"
)

// metrics are a node's Prometheus metrics, on a registry of its own (so
// several embedded nodes in one process do not collide). Counters of lease
// changes count applied entries: every node reports the same numbers.
type metrics struct {
	reg *prometheus.Registry
	// both registers on reg and on Config.Registerer (when set).
	both *nodeRegisterer

	grants, renewals, releases, expirations prometheus.Counter
	refusals                                *prometheus.CounterVec
	refusalsEvicted                         prometheus.Counter
	proposeSeconds                          prometheus.Histogram
	// stages splits proposeSeconds (propose_stage_seconds{stage}).
	stages        struct{ queue, commit, apply, answer prometheus.Observer }
	batchCommands prometheus.Histogram
	// logWrite and replication split the commit stage: the log store's
	// synced writes on this node, and (leader) each follower's round trip.
	logWrite          prometheus.Histogram
	replication       *prometheus.HistogramVec
	stateChecks       *prometheus.CounterVec
	forwardCut        prometheus.Counter
	admissionRefusals *prometheus.CounterVec
	renewalsCoalesced prometheus.Counter
}

// admissionRefused counts a command refused for want of admission budget.
func (m *metrics) admissionRefused(c admitClass) {
	switch c {
	case classGrant:
		m.admissionRefusals.WithLabelValues("grant").Inc()
	case classHeld:
		m.admissionRefusals.WithLabelValues("held").Inc()
	case classUrgent:
		m.admissionRefusals.WithLabelValues("urgent").Inc()
	}
}

func newMetrics(n *Node) *metrics {
	own := prometheus.NewRegistry()
	reg := newNodeRegisterer(own, n.cfg.Registerer, n.cfg.ID)
	m := &metrics{reg: own, both: reg}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "leasefence", Name: name, Help: help})
		reg.MustRegister(c)
		return c
	}
	m.grants = counter("grants_total", "Leases granted (applied Acquire commands that issued a token).")
	m.renewals = counter("renewals_total", "Lease renewals applied.")
	m.releases = counter("releases_total", "Leases released.")
	m.expirations = counter("expirations_total", "Leases removed after expires_at + skew margin.")
	m.forwardCut = counter("forward_hops_cut_total", "Follower: forwarded calls cut because the leader did not answer in time or raft's view of the leader moved.")
	batchStat := func(name, help string, pick func(calls, messages uint64) uint64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "leasefence", Name: name, Help: help}, func() float64 {
			if n.fwd == nil {
				return 0
			}
			return float64(pick(n.fwd.batchStats()))
		}))
	}
	batchStat("forward_batched_calls_total", "Follower: calls forwarded to the leader batched on its Calls stream.",
		func(calls, _ uint64) uint64 { return calls })
	batchStat("forward_batch_messages_total", "Follower: messages that carried those calls (calls/messages is the mean batch).",
		func(_, messages uint64) uint64 { return messages })
	m.renewalsCoalesced = counter("renewals_coalesced_total", "Leader: renewals that rode on a renewal of the same lease already waiting for a batch, instead of adding a command (both callers get its outcome).")
	m.admissionRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "leasefence", Name: "admission_refusals_total",
		Help: "Leader: client commands refused with ResourceExhausted (reason OVERLOADED, nothing proposed) because too many of their class were pending, by class: held (renewals and releases, past --max-pending), grant (past --max-pending-grants), urgent (renewals of leases with under a third of their ttl left, on their own --max-pending).",
	}, []string{"class"})
	reg.MustRegister(m.admissionRefusals)
	m.admissionRefusals.WithLabelValues("held")
	m.admissionRefusals.WithLabelValues("grant")
	m.admissionRefusals.WithLabelValues("urgent")
	for class, name := range map[admitClass]string{classHeld: "held", classGrant: "grant", classUrgent: "urgent"} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "leasefence", Name: "proposals_pending",
			Help:        "Leader: client commands admitted and not yet answered, by class: held (renewals and releases, bounded by --max-pending), grant (bounded by --max-pending-grants), urgent (renewals of leases with under a third of their ttl left, bounded by their own --max-pending).",
			ConstLabels: prometheus.Labels{"class": name}},
			func() float64 { return float64(n.adm.pending[class].Load()) }))
	}
	m.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "leasefence", Name: "refusals_total",
		Help: "Commands refused by the state machine, by reason: held, not_found, invalid, request_id_reused, lease_ended (a replayed grant that has ended).",
	}, []string{"reason"})
	m.proposeSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "leasefence", Name: "propose_seconds",
		Help:    "Leader: time from a command's arrival at the group commit to its applied result.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
	stages := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "leasefence", Name: "propose_stage_seconds",
		Help: "Leader: where propose_seconds goes, by stage: queue (a command's arrival to its batch sealed; per command), " +
			"commit (batch sealed to the state machine starting it: encode, log write, replication, commit; per entry), " +
			"apply (the state machine applying the entry; per entry), answer (applied to the proposer woken with the results; per entry).",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
	}, []string{"stage"})
	reg.MustRegister(stages)
	m.stages.queue, m.stages.commit = stages.WithLabelValues("queue"), stages.WithLabelValues("commit")
	m.stages.apply, m.stages.answer = stages.WithLabelValues("apply"), stages.WithLabelValues("answer")
	m.batchCommands = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "leasefence", Name: "batch_commands",
		Help:    "Leader: commands per Raft entry (group commit).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 12),
	})
	m.logWrite = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "leasefence", Name: "log_write_seconds",
		Help: "Each write of entries to this node's Raft log, synced to disk: on the leader before it replicates them, on a follower before it answers. " +
			"The disk's share of every commit (etcd: wal_fsync_duration_seconds).",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
	})
	m.replication = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "leasefence", Name: "replication_seconds",
		Help: "Leader: time from sending a follower an AppendEntries that carries entries to its answer, by follower id: " +
			"the network both ways, the follower's log write (its log_write_seconds) and its hand-offs (etcd: network_peer_round_trip_time_seconds).",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
	}, []string{"peer"})
	reg.MustRegister(m.logWrite, m.replication)
	m.stateChecks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "leasefence", Name: "state_checks_total",
		Help: "Comparisons of this node's state checkpoint with the other voters' (cluster/DESIGN.md), by result: match, peer_differs (another replica differs from the majority this node is in), corrupt (this node differs), undecided (no majority agrees).",
	}, []string{"result"})
	reg.MustRegister(m.refusals, m.proposeSeconds, m.batchCommands, m.stateChecks)
	for _, r := range []string{"match", "peer_differs", "corrupt", "undecided"} {
		m.stateChecks.WithLabelValues(r)
	}
	m.refusalsEvicted = counter("dedup_refusals_evicted_total",
		"Refused request ids forgotten before --refusal-keep because --max-refusals were remembered (oldest first): a late copy of such a request is no longer refused by its id.")
	for _, r := range []string{"held", "not_found", "invalid", "request_id_reused", "lease_ended"} {
		m.refusals.WithLabelValues(r)
	}

	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "leasefence", Name: name, Help: help}, func() float64 {
			if n.raft == nil { // not started yet
				return 0
			}
			return f()
		}))
	}
	gauge("leases_live", "Leases held in the state machine (including expired ones not yet removed).", func() float64 {
		var v int
		n.sm.read(func(st *fsm.State) { v = st.Len() })
		return float64(v)
	})
	dedupGauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "leasefence", Name: "dedup_entries",
		Help: "Request ids the state machine remembers, by kind: grant (kept max ttl + skew margin) and refusal (kept --refusal-keep, at most --max-refusals).",
	}, []string{"kind"})
	reg.MustRegister(collectorFunc(func(ch chan<- prometheus.Metric) {
		if n.raft == nil {
			return
		}
		var g, r int
		n.sm.read(func(st *fsm.State) { g, r = st.DedupLen() })
		dedupGauge.WithLabelValues("grant").Set(float64(g))
		dedupGauge.WithLabelValues("refusal").Set(float64(r))
		dedupGauge.Collect(ch)
	}, dedupGauge))
	gauge("waiters", "Leader: Acquire calls queued with wait, over all resources.", func() float64 {
		return float64(n.waiters.total())
	})
	gauge("cluster_time_seconds", "Last applied cluster time.", func() float64 {
		var v int64
		n.sm.read(func(st *fsm.State) { v = st.Now() })
		return time.Duration(v).Seconds()
	})
	gauge("leader", "1 when this node leads and serves (its barrier applied), else 0.", func() float64 {
		if n.IsLeader() {
			return 1
		}
		return 0
	})
	gauge("snapshot_threshold_entries", "Log entries since the last snapshot that trigger the next: --snapshot-threshold, raised while the state is large (docs/OPERATIONS.md).", func() float64 {
		return float64(n.raft.ReloadableConfig().SnapshotThreshold)
	})
	gauge("snapshot_bytes", "Size of the newest snapshot in this node's snapshot store (0: none).", func() float64 {
		return float64(n.lastSnapshotBytes())
	})
	gauge("state_corrupt", "1 when this node's state was found to differ from the majority's: it serves nothing and refuses leadership until replaced (docs/OPERATIONS.md, \"Corruption\").", func() float64 {
		if n.StateCorrupt() != "" {
			return 1
		}
		return 0
	})
	gauge("raft_term", "Current Raft term.", func() float64 { return float64(n.raft.CurrentTerm()) })
	gauge("raft_commit_index", "Raft commit index.", func() float64 { return float64(n.raft.CommitIndex()) })
	gauge("raft_applied_index", "Raft applied index.", func() float64 { return float64(n.raft.AppliedIndex()) })
	gauge("raft_last_index", "Last Raft log index.", func() float64 { return float64(n.raft.LastIndex()) })
	gauge("raft_last_contact_seconds", "Follower: seconds since the leader was last heard from (0 on the leader).", func() float64 {
		if n.raft.State() == raft.Leader {
			return 0
		}
		lc := n.raft.LastContact()
		if lc.IsZero() {
			return -1
		}
		return time.Since(lc).Seconds()
	})
	states := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "leasefence", Name: "raft_state", Help: "1 for the node's current Raft state."}, []string{"state"})
	reg.MustRegister(collectorFunc(func(ch chan<- prometheus.Metric) {
		if n.raft == nil {
			return
		}
		cur := n.raft.State()
		for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
			v := 0.0
			if s == cur {
				v = 1
			}
			states.WithLabelValues(s.String()).Set(v)
		}
		states.Collect(ch)
	}, states))
	registerPortMetrics(reg, n) // servers.go
	// The process's own figures: the node's registry only (an embedding
	// application registers its own).
	own.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// nodeRegisterer registers a node's collectors on its own registry and,
// when the embedding application gave one (Config.Registerer), on that
// too, labelled node=<id>. A collision there (two nodes with one id, or a
// metric of the application's with the same name) is an error of Start,
// not a panic; Close unregisters them, so that a node started again in the
// same process registers anew.
type nodeRegisterer struct {
	own  *prometheus.Registry
	host prometheus.Registerer // nil: none

	mu      sync.Mutex
	onHost  []prometheus.Collector
	hostErr error
}

func newNodeRegisterer(own *prometheus.Registry, host prometheus.Registerer, id string) *nodeRegisterer {
	r := &nodeRegisterer{own: own}
	if host != nil {
		r.host = prometheus.WrapRegistererWith(prometheus.Labels{"node": id}, host)
	}
	return r
}

func (r *nodeRegisterer) Register(c prometheus.Collector) error {
	if err := r.own.Register(c); err != nil {
		return err
	}
	if r.host == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.host.Register(c); err != nil {
		if r.hostErr == nil {
			r.hostErr = fmt.Errorf("cluster: registering the node's metrics on Config.Registerer: %w", err)
		}
		return nil
	}
	r.onHost = append(r.onHost, c)
	return nil
}

// MustRegister panics only on a collision in the node's own registry (a
// bug of ours); one on the application's is reported by err.
func (r *nodeRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *nodeRegisterer) Unregister(c prometheus.Collector) bool {
	ok := r.own.Unregister(c)
	if r.host != nil {
		r.host.Unregister(c)
	}
	return ok
}

// err is the first collision on the application's registerer.
func (r *nodeRegisterer) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hostErr
}

// unregisterHost removes the node's collectors from the application's
// registerer.
func (r *nodeRegisterer) unregisterHost() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.onHost {
		r.host.Unregister(c)
	}
	r.onHost = nil
}

// observeApplied counts what one applied entry did.
func (m *metrics) observeApplied(a *fsm.Applied) {
	for _, ev := range a.Events {
		switch ev.Type {
		case fsm.EventGranted:
			m.grants.Inc()
		case fsm.EventRenewed:
			m.renewals.Inc()
		case fsm.EventReleased:
			m.releases.Inc()
		case fsm.EventExpired:
			m.expirations.Inc()
		}
	}
	if a.RefusalsEvicted > 0 {
		m.refusalsEvicted.Add(float64(a.RefusalsEvicted))
	}
	for _, r := range a.Results {
		switch {
		case r.Err == nil:
		case errors.Is(r.Err, fsm.ErrHeld):
			m.refusals.WithLabelValues("held").Inc()
		case errors.Is(r.Err, fsm.ErrNotFound):
			m.refusals.WithLabelValues("not_found").Inc()
		case errors.Is(r.Err, fsm.ErrRequestIDReused):
			m.refusals.WithLabelValues("request_id_reused").Inc()
		case errors.Is(r.Err, fsm.ErrLeaseEnded):
			m.refusals.WithLabelValues("lease_ended").Inc()
		default:
			m.refusals.WithLabelValues("invalid").Inc()
		}
	}
}

// collectorFunc adapts a collect function (with the vector it fills, for
// Describe) to prometheus.Collector.
type collectorFuncT struct {
	collect func(chan<- prometheus.Metric)
	desc    prometheus.Collector
}

func collectorFunc(f func(chan<- prometheus.Metric), desc prometheus.Collector) prometheus.Collector {
	return collectorFuncT{f, desc}
}

func (c collectorFuncT) Describe(ch chan<- *prometheus.Desc) { c.desc.Describe(ch) }
func (c collectorFuncT) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }
