package conformance

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
)

// KeepEnv names a directory where a failing chaos run leaves everything it saw (see keep).
const KeepEnv = "TIDEMARK_CHAOS_KEEP"

// The names every chaos run uses on its own cluster.
const (
	chaosIn    = "in"
	chaosOut   = "out"
	chaosGroup = "g"
)

// A chaosConfig is everything one seed decides: the cluster, the records, the App's options, the
// handler's outcomes and the schedule of kills, stops and joins. It is a function of the seed
// alone, so a seed replays the same run (timing aside).
type chaosConfig struct {
	Seed       uint64
	Txn        bool // Transactional; Tracked otherwise
	Partitions int32
	Records    int
	Upfront    int  // records produced before the first member starts; the rest in chunks, between steps
	TxnInputs  bool // some inputs are produced in transactions, some of them aborted

	Workers     int
	Ordering    runtime.Ordering
	MaxPoll     int
	PerPart     int  // MaxInFlightPerPartition
	Static      bool // members use InstanceID (static membership)
	PDrop       float64
	PRetry      float64 // plain retry: in place (Tracked) or a window abort (Transactional)
	PRetryAfter float64
	PPanic      float64 // a panic under OnPanic(PanicRetry)
	MaxDelay    time.Duration

	Members int // started at once
	Steps   []chaosStep
}

// A chaosStep waits until the group has committed At × the records produced so far, then acts on
// a member slot, then produces Produce more records.
type chaosStep struct {
	At      float64
	Action  string // "kill", "kill+restart", "stop", "stop+restart", "join", "restart"
	Slot    int
	Produce int
}

func (s chaosStep) String() string {
	return fmt.Sprintf("at %.0f%%: %s slot %d, then produce %d", s.At*100, s.Action, s.Slot, s.Produce)
}

func (c chaosConfig) String() string {
	mode := "Tracked"
	if c.Txn {
		mode = "Transactional"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s, %d partitions, %d records (%d up front, transactional inputs %v), "+
		"%d workers %s, MaxPollRecords %d, MaxInFlightPerPartition %d, static %v, "+
		"outcomes drop %.3f retry %.3f retry-after %.3f (≤%v) panic %.3f, %d members at start",
		c.Seed, mode, c.Partitions, c.Records, c.Upfront, c.TxnInputs, c.Workers, c.Ordering, c.MaxPoll, c.PerPart,
		c.Static, c.PDrop, c.PRetry, c.PRetryAfter, c.MaxDelay, c.PPanic, c.Members)
	for _, s := range c.Steps {
		b.WriteString("; " + s.String())
	}
	return b.String()
}

// chaosConfigFor derives a run from its seed.
func chaosConfigFor(seed uint64) chaosConfig {
	r := rand.New(rand.NewPCG(seed, 0x7469_6465_6d61_726b)) // "tidemark"
	c := chaosConfig{Seed: seed}
	c.Txn = r.IntN(2) == 1
	c.Partitions = int32(1 + r.IntN(8))
	// 100–5,000 records, log-uniform: most runs are short, some are long.
	c.Records = int(math.Round(100 * math.Pow(50, r.Float64())))
	c.Upfront = c.Records * (30 + r.IntN(71)) / 100
	c.TxnInputs = r.IntN(4) == 0
	c.Workers = 1 + r.IntN(4)
	c.Ordering = []runtime.Ordering{runtime.ByPartition, runtime.ByKey, runtime.Unordered}[r.IntN(3)]
	c.MaxPoll = []int{10, 50, 500}[r.IntN(3)]
	c.PerPart = []int{16, 64, 1024}[r.IntN(3)]
	c.Static = r.IntN(3) > 0
	c.PDrop = 0.1 * r.Float64()
	c.PRetry = 0.05 * r.Float64()
	c.PRetryAfter = 0.05 * r.Float64()
	c.PPanic = 0.03 * r.Float64()
	c.MaxDelay = time.Duration(20+r.IntN(281)) * time.Millisecond
	if c.Txn {
		// Every retry or panic aborts a whole window and costs a re-read: keep about a dozen.
		if aborts := float64(c.Records) * (c.PRetry + c.PPanic); aborts > 12 {
			c.PRetry, c.PPanic = c.PRetry*12/aborts, c.PPanic*12/aborts
		}
		c.MaxDelay = min(c.MaxDelay, 100*time.Millisecond) // a delay pauses the copy's partition
	}
	c.Members = 1 + r.IntN(3)

	// The schedule: 2–6 steps at increasing progress, never leaving the group without a member
	// for good.
	n := 2 + r.IntN(5)
	ats := make([]float64, n)
	for i := range ats {
		ats[i] = 0.05 + 0.85*r.Float64()
	}
	slices.Sort(ats)
	slots := c.Members
	alive := make([]bool, slots, 4)
	for i := range alive {
		alive[i] = true
	}
	rest := c.Records - c.Upfront
	for i, at := range ats {
		var st chaosStep
		st.At = at
		var dead, live []int
		for s, a := range alive {
			if a {
				live = append(live, s)
			} else {
				dead = append(dead, s)
			}
		}
		switch k := r.IntN(6); {
		case k == 0 && slots < 4:
			st.Action, st.Slot = "join", slots
			slots++
			alive = append(alive, true)
		case k == 1 && len(dead) > 0:
			st.Action, st.Slot = "restart", dead[r.IntN(len(dead))]
			alive[st.Slot] = true
		default:
			st.Slot = live[r.IntN(len(live))]
			st.Action = []string{"kill", "stop"}[r.IntN(2)]
			if len(live) == 1 || r.IntN(2) == 0 {
				st.Action += "+restart" // the last member always comes back
			} else {
				alive[st.Slot] = false
			}
		}
		if i == n-1 {
			st.Produce = rest
		} else if rest > 0 {
			st.Produce = r.IntN(rest + 1)
		}
		rest -= st.Produce
		c.Steps = append(c.Steps, st)
	}
	return c
}

// The handler's outcomes.
const (
	outAck        = "ack"
	outDrop       = "drop"
	outRetry      = "retry"
	outRetryAfter = "retry_after"
	outPanic      = "panic"
)

// settles reports whether a Return with this outcome settles its record: ack, drop, and a retry
// copy (the original completes once the copy is acknowledged).
func settles(outcome string) bool {
	return outcome == outAck || outcome == outDrop || outcome == outRetryAfter
}

// decide is the handler's outcome for input id on attempt, a function of the seed: attempts from
// the third on always ack or drop, so every record ends.
func (c chaosConfig) decide(id string, attempt int) (string, time.Duration) {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d", c.Seed, id, attempt)
	x := h.Sum64()
	u := float64(x>>11) / (1 << 53)
	delay := time.Duration(1+x%uint64(c.MaxDelay/time.Millisecond)) * time.Millisecond
	if u < c.PDrop {
		return outDrop, 0
	}
	if attempt >= 3 {
		return outAck, 0
	}
	switch u -= c.PDrop; {
	case u < c.PRetry:
		return outRetry, 0
	case u < c.PRetry+c.PRetryAfter:
		return outRetryAfter, delay
	case u < c.PRetry+c.PRetryAfter+c.PPanic:
		return outPanic, 0
	}
	return outAck, 0
}

// Chaos runs n seeded chaos runs, seeds first, first+1, ..., each as a subtest "seed=N" with its
// own cluster, and checks the invariants after each (see the package doc). A failing run logs its
// configuration and how to replay it. Call it from a test that does nothing before it: the runs'
// members are that test re-executed (kfaketest.Spawn).
func Chaos(t *testing.T, first uint64, n int) {
	if env, ok := kfaketest.Child(); ok {
		chaosChild(t, env)
		return
	}
	for seed := first; seed < first+uint64(n); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			cfg := chaosConfigFor(seed)
			t.Log(cfg)
			r := &chaosRun{t: t, cfg: cfg}
			defer func() {
				if t.Failed() {
					if dir := os.Getenv(KeepEnv); dir != "" && r.c != nil {
						r.keep(filepath.Join(dir, fmt.Sprintf("seed-%d", seed)))
					}
					t.Logf("chaos: seed %d FAILED; replay it with: make chaos SEED=%d\nconfiguration: %v", seed, seed, cfg)
				}
			}()
			r.run()
		})
	}
}

// chaosRun is the parent side of one seed.
type chaosRun struct {
	t   *testing.T
	cfg chaosConfig
	c   *kfaketest.Cluster

	mu       sync.Mutex
	procs    []*kfaketest.Process // by slot
	alive    []bool
	inputs   []string // every committed input id, in production order
	nextID   int
	maxSeen  map[int32]int64      // the highest offset the group asked to commit, per partition
	seenAt   map[int]time.Time    // when each commit of the group arrived, by seq
	changed  chan struct{}        // closed and replaced when maxSeen grows
	exits    []string             // graceful stops that did not end cleanly
	wentBack []string             // committed offsets the group held that went back
	ghosts   map[string]time.Time // members of exited runs still in the group, by member id: since when
	start    time.Time
}

// stepTimeout bounds each wait of a run: progress between steps, the drain at the end.
const stepTimeout = 90 * time.Second

func (r *chaosRun) run() {
	t, cfg := r.t, r.cfg
	r.start = time.Now()
	r.c = kfaketest.New(t, kfaketest.Topic(chaosIn, cfg.Partitions), kfaketest.Topic(chaosOut, 1))
	r.maxSeen = map[int32]int64{}
	r.seenAt = map[int]time.Time{}
	r.changed = make(chan struct{})
	remove := r.c.CommitLog().OnCommit(r.observe)
	defer remove()
	stopMonitor := r.monitorCommitted()
	defer stopMonitor()

	r.produce(cfg.Upfront)
	for range cfg.Members {
		r.spawn()
	}
	for i, st := range cfg.Steps {
		r.mu.Lock()
		target := int64(math.Ceil(st.At * float64(len(r.inputs))))
		r.mu.Unlock()
		if !r.waitProgress(target) {
			t.Fatalf("chaos: step %d (%v): the group never committed %d offsets in %v: %s", i, st, target, stepTimeout, r.state())
		}
		t.Logf("chaos: %v (%s): step %d: %v", time.Since(r.start).Round(time.Millisecond), time.Now().Format("15:04:05.000"), i, st)
		r.act(st)
		r.produce(st.Produce)
	}
	r.drain()
	stopMonitor()
	r.check()
	t.Logf("chaos: done in %v", time.Since(r.start).Round(time.Millisecond))
}

// observe runs on the cluster's request loop for every commit: it orders the commit after every
// event the members logged before it (a note in each member's event log) and tracks progress.
func (r *chaosRun) observe(cm kfaketest.Commit) {
	if cm.Group != chaosGroup || cm.Topic != chaosIn {
		return
	}
	r.mu.Lock()
	procs := slices.Clone(r.procs)
	r.seenAt[cm.Seq] = time.Now()
	if cm.Offset > r.maxSeen[cm.Partition] {
		r.maxSeen[cm.Partition] = cm.Offset
		close(r.changed)
		r.changed = make(chan struct{})
	}
	r.mu.Unlock()
	if !r.cfg.Txn {
		for _, p := range procs {
			p.Note("commit", strconv.Itoa(cm.Seq))
		}
	}
}

// monitorCommitted samples the group's committed offsets (what the group holds, as a client reads
// them) every 10ms until stop, and records every partition whose offset went back between two
// samples. stop waits for the sampler and may be called more than once.
func (r *chaosRun) monitorCommitted() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := map[int32]int64{}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			qctx, qcancel := context.WithTimeout(ctx, time.Second)
			m, err := r.c.CommittedContext(qctx, chaosGroup, chaosIn)
			qcancel()
			if err == nil {
				for p, o := range m {
					if prev, ok := last[p]; ok && o < prev {
						r.mu.Lock()
						r.wentBack = append(r.wentBack, fmt.Sprintf("partition %d: the group's committed offset went from %d to %d (at %s)",
							p, prev, o, time.Now().Format("15:04:05.000")))
						r.mu.Unlock()
					}
					last[p] = o
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

// waitProgress waits until the highest commits asked for add up to target, or stepTimeout.
func (r *chaosRun) waitProgress(target int64) bool {
	deadline := time.After(stepTimeout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		r.mu.Lock()
		var sum int64
		for _, o := range r.maxSeen {
			sum += o
		}
		changed := r.changed
		r.mu.Unlock()
		if sum >= target {
			return true
		}
		select {
		case <-changed:
		case <-tick.C:
			r.skipIfGhosts()
		case <-deadline:
			return false
		}
	}
}

// ghostAge is how long a member of a run that has exited may stay in the group before the run
// counts as stuck on the kfake bug: well past the session (2s) and rebalance (10s) timeouts.
const ghostAge = 15 * time.Second

// skipIfGhosts ends the run as inconclusive (skipped, with a line on stderr) when a member of a
// member run that has exited has stayed in the group longer than ghostAge: kfake never expires a
// member whose JoinGroup answer it could not deliver (kfaketest's
// TestKfakeMemberGoneWhileJoiningNeverExpires), so its partitions are consumed by nobody until its
// instance id rejoins, and no invariant can be judged. Members are told apart by their client id,
// "chaos-<slot>-run<run>".
func (r *chaosRun) skipIfGhosts() {
	gi := r.c.Kfake().GroupInfo(chaosGroup)
	if gi == nil {
		return
	}
	now := time.Now()
	r.mu.Lock()
	if r.ghosts == nil {
		r.ghosts = map[string]time.Time{}
	}
	var stuck []string
	for _, m := range gi.Members {
		var slot, run int
		if _, err := fmt.Sscanf(m.ClientID, "chaos-%d-run%d", &slot, &run); err != nil || slot >= len(r.procs) {
			continue
		}
		if run == r.procs[slot].Run() && r.alive[slot] {
			continue // a live member
		}
		first, ok := r.ghosts[m.MemberID]
		if !ok {
			r.ghosts[m.MemberID] = now
			continue
		}
		if now.Sub(first) > ghostAge {
			stuck = append(stuck, fmt.Sprintf("%s (%s, gone for %v)", m.MemberID, m.ClientID, now.Sub(first).Round(time.Second)))
		}
	}
	r.mu.Unlock()
	if len(stuck) == 0 {
		return
	}
	msg := fmt.Sprintf("chaos: seed %d INCONCLUSIVE (skipped): kfake bug, a member that died while joining never leaves the group "+
		"(kfaketest TestKfakeMemberGoneWhileJoiningNeverExpires): %v; %s", r.cfg.Seed, stuck, r.state())
	fmt.Fprintln(os.Stderr, msg)
	r.t.Skip(msg)
}

// produce writes n more inputs, spread over the partitions with a few keys, some in transactions
// (and, for each committed transaction, sometimes an aborted one, whose records must never be
// handled).
func (r *chaosRun) produce(n int) {
	if n <= 0 {
		return
	}
	t, cfg := r.t, r.cfg
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(r.nextID)))
	var batch []*kgo.Record
	var ids []string
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if cfg.TxnInputs && rng.IntN(2) == 0 {
			r.c.ProduceTxn(t, "upstream", true, batch...)
			if rng.IntN(2) == 0 {
				aborted := &kgo.Record{Topic: chaosIn, Partition: batch[0].Partition, Value: []byte("aborted-" + ids[0])}
				r.c.ProduceTxn(t, "upstream", false, aborted)
			}
		} else {
			r.c.Produce(t, batch...)
		}
		r.mu.Lock()
		r.inputs = append(r.inputs, ids...)
		r.mu.Unlock()
		batch, ids = batch[:0], ids[:0]
	}
	for range n {
		id := fmt.Sprintf("i%05d", r.nextID)
		r.nextID++
		rec := &kgo.Record{Topic: chaosIn, Partition: rng.Int32N(cfg.Partitions), Value: []byte(id)}
		if rng.IntN(4) > 0 {
			rec.Key = fmt.Appendf(nil, "k%d", rng.IntN(16)) // keyed: hashed, so Partition is ignored
		}
		batch, ids = append(batch, rec), append(ids, id)
		if len(batch) == 100 {
			flush()
		}
	}
	flush()
}

// spawn starts a new member slot.
func (r *chaosRun) spawn() {
	r.mu.Lock()
	slot := len(r.procs)
	r.mu.Unlock()
	p := r.c.Spawn(r.t, map[string]string{"seed": strconv.FormatUint(r.cfg.Seed, 10), "slot": strconv.Itoa(slot)})
	p.SetTimeout(60 * time.Second)
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.alive = append(r.alive, true)
	r.mu.Unlock()
}

// act performs one step's action.
func (r *chaosRun) act(st chaosStep) {
	if st.Action == "join" {
		r.spawn()
		return
	}
	r.mu.Lock()
	p := r.procs[st.Slot]
	r.mu.Unlock()
	switch st.Action {
	case "restart":
		p.Restart(r.t)
	case "kill", "kill+restart":
		p.Kill(r.t)
	case "stop", "stop+restart":
		r.stop(st.Slot, p)
	}
	alive := st.Action == "restart"
	if strings.HasSuffix(st.Action, "+restart") {
		p.Restart(r.t)
		alive = true
	}
	r.mu.Lock()
	r.alive[st.Slot] = alive
	r.mu.Unlock()
}

// stop stops a member gracefully and records a run that did not end cleanly.
func (r *chaosRun) stop(slot int, p *kfaketest.Process) {
	err := p.Terminate(r.t)
	if err == nil {
		return
	}
	var note string
	for _, ev := range p.Events() {
		if ev.Run == p.Run() && ev.Kind == kfaketest.EventNote && ev.Note == "run-returned" {
			note = ev.Text
		}
	}
	what := fmt.Sprintf("slot %d run %d: %v (Run returned: %s)", slot, p.Run(), err, note)
	// The kfake bug of TestKfakeStaticMemberGoneMidRebalance: the member's JoinGroup went
	// unanswered until franz-go gave up, and a commit cannot be made while the member joins, so
	// Shutdown's final commit ran out its 5s bound (and said so, as it must: ErrCommitTimeout, whose
	// text this matched only as "context deadline exceeded" before, so seed 688 failed 2 runs in 6).
	// Nothing is lost: the records stay uncommitted and the other checks still judge the run.
	// Under Transactional the same unanswered join holds the window's End instead (franz-go's End
	// waits for a heartbeat, which a joining member does not send) until WindowTimeout: the last
	// window's transaction did not end, and its records are read again (seed 875).
	timedOut := strings.Contains(note, "final commit: "+runtime.ErrCommitTimeout.Error()) ||
		strings.Contains(note, "the last window's transaction did not end") && strings.Contains(note, context.DeadlineExceeded.Error())
	if timedOut && strings.Contains(runOutput(p), "unable to join group session") {
		msg := "chaos: NOTE (kfake bug, JoinGroup unanswered): " + what
		fmt.Fprintln(os.Stderr, msg)
		r.t.Log(msg)
		return
	}
	r.mu.Lock()
	r.exits = append(r.exits, what)
	r.mu.Unlock()
}

// runOutput is what the Process's current run wrote.
func runOutput(p *kfaketest.Process) string {
	out := p.Output()
	if i := strings.LastIndex(out, fmt.Sprintf("--- run %d\n", p.Run())); i >= 0 {
		return out[i:]
	}
	return out
}

// drain waits until the group has committed everything (the high watermarks, which grow while
// retry copies are made), then stops every member gracefully. A copy made by a late handler after
// that (possible after a revoke) brings a member back until nothing is left.
func (r *chaosRun) drain() {
	t := r.t
	for round := 0; ; round++ {
		r.mu.Lock()
		anyAlive := slices.Contains(r.alive, true)
		r.mu.Unlock()
		if !anyAlive {
			r.act(chaosStep{Action: "restart", Slot: 0})
		}
		if !r.waitAllCommitted() {
			t.Fatalf("chaos: the group never committed everything in %v: %s", stepTimeout, r.state())
		}
		for slot := range r.procs {
			r.mu.Lock()
			p, alive := r.procs[slot], r.alive[slot]
			r.alive[slot] = false
			r.mu.Unlock()
			if alive {
				r.stop(slot, p)
			}
		}
		// A killed member that did not come back leaves its transaction open until the cluster's
		// transaction timeout aborts it; until then read_committed readers stop before it.
		if !r.waitNoOpenTxn(chaosIn) || !r.waitNoOpenTxn(chaosOut) {
			t.Fatalf("chaos: a transaction stayed open %v after every member stopped: %s", stepTimeout, r.state())
		}
		if r.allCommitted(t.Context()) {
			return
		}
		require.Less(t, round, 3, "records keep appearing after every member stopped")
	}
}

// waitNoOpenTxn waits until no transaction is open on topic: every partition's last stable
// offset is its high watermark.
func (r *chaosRun) waitNoOpenTxn(topic string) bool {
	deadline := time.Now().Add(stepTimeout)
	for {
		open := false
		for _, pi := range r.c.Kfake().PartitionInfos(topic) {
			open = open || pi.LastStableOffset != pi.HighWatermark
		}
		if !open {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-r.t.Context().Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitAllCommitted waits until the committed offsets equal the high watermarks of every partition
// (a partition with nothing in it needs no commit).
func (r *chaosRun) waitAllCommitted() bool {
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	ghostCheck := time.Now().Add(time.Second)
	for {
		if r.allCommitted(ctx) {
			return true
		}
		if time.Now().After(ghostCheck) {
			r.skipIfGhosts()
			ghostCheck = time.Now().Add(time.Second)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// allCommitted reports whether the group's committed offsets are the high watermarks.
func (r *chaosRun) allCommitted(ctx context.Context) bool {
	hw, err := r.c.HighWatermarksContext(ctx, chaosIn)
	if err != nil {
		return false
	}
	committed, err := r.c.CommittedContext(ctx, chaosGroup, chaosIn)
	if err != nil {
		return false
	}
	for p, end := range hw {
		if committed[p] != end { // absent: 0, as is an empty partition's end
			return false
		}
	}
	return len(committed) <= len(hw)
}

// state describes the run for a failure: committed offsets, high watermarks, members.
func (r *chaosRun) state() string {
	committed, _ := r.c.CommittedContext(context.Background(), chaosGroup, chaosIn)
	hw, _ := r.c.HighWatermarksContext(context.Background(), chaosIn)
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("after %v: committed %v, high watermarks %v, members alive %v, %d inputs produced",
		time.Since(r.start).Round(time.Millisecond), committed, hw, r.alive, len(r.inputs))
}

// chaosChild is one member: an App in the seed's mode whose handler logs every start and return
// and settles records as the seed decides. It runs until killed, or until Terminate, when it
// shuts down gracefully and notes what Run returned.
func chaosChild(t *testing.T, env kfaketest.ChildEnv) {
	seed, err := strconv.ParseUint(env.Args["seed"], 10, 64)
	if err != nil {
		t.Fatalf("chaos child: seed %q: %v", env.Args["seed"], err)
	}
	cfg := chaosConfigFor(seed)
	ctx, stop := env.Context()
	defer stop()
	clientOpts := append(env.ClientOpts(), kgo.ClientID(fmt.Sprintf("chaos-%s-run%d", env.Args["slot"], env.Run)))
	// The member's output (shown when the run fails, and kept) has the runtime's warnings and
	// franz-go's group events, timestamped: enough for a post-mortem. TIDEMARK_TEST_LOG gives all.
	clientOpts = append(clientOpts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, func() string {
		return time.Now().Format("15:04:05.000 ")
	})))
	log := logger()
	if os.Getenv("TIDEMARK_TEST_LOG") == "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	opts := []runtime.Option{
		runtime.Brokers(env.Brokers...),
		runtime.Logger(log),
		runtime.MaxPollRecords(cfg.MaxPoll),
	}
	mode := runtime.Tracked
	if cfg.Txn {
		mode = runtime.Transactional(env.InstanceID) // stable per slot: a restart fences its zombie
		clientOpts = append(clientOpts, kgo.TransactionTimeout(6*time.Second))
	}
	opts = append(opts, runtime.ClientOpts(clientOpts...))
	if cfg.Static {
		opts = append(opts, runtime.InstanceID(env.InstanceID))
	}
	app := runtime.New(opts...)
	var (
		mu      sync.Mutex
		aborted = map[string]bool{} // Transactional: ids that already aborted a window in this run
	)
	handler := func(ctx context.Context, d *runtime.Delivery) error {
		r := d.Record()
		id := string(r.Value)
		env.Log.Start(r.Topic, r.Partition, r.Offset, d.Attempt())
		outcome, delay := cfg.decide(id, d.Attempt())
		if cfg.Txn {
			if outcome == outRetry || outcome == outPanic {
				mu.Lock()
				if aborted[id] {
					outcome = outAck // one abort per input and run, so windows end
				}
				aborted[id] = true
				mu.Unlock()
			}
			if outcome != outRetryAfter { // the copy publishes; an aborted window's output is never seen
				if err := app.Publish(ctx, &kgo.Record{Topic: chaosOut, Key: r.Key, Value: r.Value}); err != nil {
					env.Log.Return(r.Topic, r.Partition, r.Offset, "publish-failed")
					return err
				}
			}
		}
		env.Log.Return(r.Topic, r.Partition, r.Offset, outcome)
		switch outcome {
		case outDrop:
			return runtime.Drop(errors.New("chaos: drop"))
		case outRetry:
			return runtime.Retry(errors.New("chaos: retry"))
		case outRetryAfter:
			return runtime.RetryAfter(delay, errors.New("chaos: retry after"))
		case outPanic:
			panic("chaos: panic")
		}
		return nil
	}
	hopts := []runtime.HandleOption{
		runtime.Workers(cfg.Workers), cfg.Ordering, runtime.MaxInFlightPerPartition(cfg.PerPart),
		runtime.OnPanic(runtime.PanicRetry), runtime.Backoff(func(int, error) time.Duration { return 5 * time.Millisecond }),
	}
	if cfg.Txn {
		hopts = append(hopts, runtime.WindowTimeout(4*time.Second))
	}
	runtime.Handle(app, runtime.Topic(chaosIn).Group(chaosGroup).Commit(mode), runtime.HandlerFunc(handler), hopts...)
	// Start, serve until Terminate, Shutdown: as Run does, except that a Terminate that lands while
	// the member is still joining is a clean stop, not a failed start.
	if err := app.Start(ctx); err != nil {
		if ctx.Err() != nil {
			env.Log.Note("run-returned", "stopped while starting: "+err.Error())
			return
		}
		env.Log.Note("run-returned", "start: "+err.Error())
		t.Fatalf("chaos child (seed %d, slot %s, run %d): Start: %v", seed, env.Args["slot"], env.Run, err)
	}
	select {
	case <-ctx.Done():
	case <-app.Done(): // a fatal error: Shutdown has run already
	}
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = app.Shutdown(sctx)
	if _, reason := app.State(); reason != nil {
		err = errors.Join(reason, err)
	}
	env.Log.Note("run-returned", fmt.Sprint(err))
	if err != nil {
		t.Fatalf("chaos child (seed %d, slot %s, run %d): the App ended with: %v", seed, env.Args["slot"], env.Run, err)
	}
}
