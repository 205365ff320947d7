package runtime_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
)

// handled is one handler call: which member saw which record, in which runtime generation.
type handled struct {
	p   int32
	off int64
	gen uint64
}

// handledLog records handler calls from many lanes.
type handledLog struct {
	mu sync.Mutex
	hs []handled
}

func (l *handledLog) add(d *runtime.Delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hs = append(l.hs, handled{d.Record().Partition, d.Record().Offset, d.Generation()})
}

// offsets returns the offsets handled on partition p, in the order the handler calls began.
func (l *handledLog) offsets(p int32) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int64
	for _, h := range l.hs {
		if h.p == p {
			out = append(out, h.off)
		}
	}
	return out
}

func (l *handledLog) all() []handled {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.hs)
}

// partitionsOf returns the event's partitions of topic, sorted.
func partitionsOf(e runtime.RebalancedEvent, topic string) []int32 {
	return slices.Sorted(slices.Values(e.Partitions[topic]))
}

// A revokeWatch notes, through a test observer's onRebal and onPaused hooks, the member's first
// revoke that names partitions and each partition's latest Paused state.
type revokeWatch struct {
	revoked chan struct{} // closed on that first revoke
	once    sync.Once
	mu      sync.Mutex
	first   runtime.RebalancedEvent
	paused  map[int32]bool
}

func newRevokeWatch() *revokeWatch {
	return &revokeWatch{revoked: make(chan struct{}), paused: map[int32]bool{}}
}

func (w *revokeWatch) onRebal(e runtime.RebalancedEvent) {
	if e.Kind != "revoked" || len(e.Partitions) == 0 {
		return
	}
	w.once.Do(func() {
		w.mu.Lock()
		w.first = e
		w.mu.Unlock()
		close(w.revoked)
	})
}

func (w *revokeWatch) onPaused(e runtime.PausedEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.paused[e.Partition] = e.Paused
}

// firstRevoke returns the first revoke that named partitions (zero before it).
func (w *revokeWatch) firstRevoke() runtime.RebalancedEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

// movedOne returns, of a two-partition topic, the partition the first revoke moved and the one
// kept, failing unless exactly one moved (cooperative-sticky moves one to a second member).
func (w *revokeWatch) movedOne(t *testing.T, topic string) (moved, kept int32) {
	t.Helper()
	ev := w.firstRevoke()
	ps := partitionsOf(ev, topic)
	require.Len(t, ps, 1, "cooperative-sticky moves exactly one partition: %v", ev)
	return ps[0], 1 - ps[0]
}

// startLogging starts a member of sub whose handler only logs what it is given.
func startLogging(t *testing.T, c *kfaketest.Cluster, sub runtime.Subscription, opts []runtime.Option, hopts ...runtime.HandleOption) (*runtime.App, *handledLog) {
	t.Helper()
	var log handledLog
	app := runtime.New(appOpts(c, opts...)...)
	runtime.Handle(app, sub, runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
		log.add(d)
		return nil
	}), hopts...)
	start(t, app)
	return app, &log
}

// pausedNow returns each partition's latest Paused state.
func (w *revokeWatch) pausedNow() map[int32]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.paused)
}

// requireKept checks the partition a rebalance left with member A (group "g", topic "in"): A
// handled its records 0..n-1 once each, in order, B none; and no commit of either partition went
// back.
func requireKept(t *testing.T, c *kfaketest.Cluster, aLog, bLog *handledLog, kept int32, n int64) {
	t.Helper()
	require.Equal(t, offsetRange(0, n), aLog.offsets(kept), "A's handler calls on the kept partition %d", kept)
	require.Empty(t, bLog.offsets(kept), "B's handler calls on the kept partition %d", kept)
	requireNonDecreasing(t, c, "g", "in", 0, 1)
}

// requireNonDecreasing fails unless the commits the cluster received for each of group's
// partitions of topic never go backwards.
func requireNonDecreasing(t *testing.T, c *kfaketest.Cluster, group, topic string, parts ...int32) {
	t.Helper()
	for _, p := range parts {
		log := c.CommitLog().Of(group, topic, p)
		for i := 1; i < len(log); i++ {
			require.GreaterOrEqual(t, log[i].Offset, log[i-1].Offset,
				"partition %d: commit #%d (seq %d, member %s) went back: %v", p, i, log[i].Seq, log[i].Member, offsetsOf(log))
		}
	}
}

func offsetsOf(cs []kfaketest.Commit) []int64 {
	out := make([]int64, len(cs))
	for i, c := range cs {
		out[i] = c.Offset
	}
	return out
}

// A revoke stops dispatching the revoked partition's queued records, waits for the one in a
// handler, commits what finished (Tracked: the tracker's watermark; Auto: the record after the
// highest one done) before the revoke returns, and the next owner starts exactly there: nothing
// handled twice, nothing lost, commits never go back (DESIGN §3.1, §3.7, §3.11).
func TestRevokeWithWorkInFlightCommitsWhatFinishedBeforeHandingOver(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Tracked, runtime.Auto} {
		t.Run(mode.String(), func(t *testing.T) { testRevokeWithWorkInFlight(t, mode) })
	}
}

func testRevokeWithWorkInFlight(t *testing.T, mode runtime.CommitMode) {
	c := kfaketest.New(t, kfaketest.Topic("in", 2))
	for p := range int32(2) {
		var vs []string
		for i := range 5 {
			vs = append(vs, fmt.Sprintf("p%d-%d", p, i))
		}
		c.ProduceValues(t, "in", p, vs...)
	}
	sub := runtime.Topic("in").Group("g").Commit(mode)

	// Member A: offset 2 of each partition blocks until A's revoke has begun. The "revoked" event
	// is sent once the partition's dispatching has stopped (Observer.Rebalanced), so 3 and 4 of the
	// moved partition are never started by A. A holds at most MaxInFlightPerPartition(4) records,
	// so with 5 fetched each partition is paused, and the revoke resumes the moved one (DESIGN
	// §3.7: "resume it if it was paused").
	watch := newRevokeWatch()
	revoked := watch.revoked
	obsA := &pauseObserver{observer: &observer{}, onPaused: watch.onPaused}
	obsA.onRebal = watch.onRebal
	var aLog handledLog
	appA := runtime.New(appOpts(c, runtime.Observe(obsA))...)
	runtime.Handle(appA, sub, runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
		aLog.add(d)
		if d.Record().Offset != 2 {
			return nil
		}
		select {
		case <-revoked:
		case <-ctx.Done(): // only if the test failed and the App is shutting down
		}
		return nil
	}), runtime.Workers(2), runtime.MaxInFlightPerPartition(4))
	start(t, appA)

	// Steady state before B joins: 0 and 1 done, 2 blocked, 3 and 4 queued in A, on both
	// partitions, which are paused.
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2, 1: 2})
	eventually(t, func() bool {
		return slices.Equal(aLog.offsets(0), []int64{0, 1, 2}) && slices.Equal(aLog.offsets(1), []int64{0, 1, 2})
	}, "A is not blocked on offset 2 of both partitions: %v", aLog.all())
	eventually(t, func() bool {
		obsA.mu.Lock()
		defer obsA.mu.Unlock()
		n := map[int32]int{}
		for _, e := range obsA.delivered {
			n[e.Partition] += e.Records
		}
		return n[0] == 5 && n[1] == 5
	}, "A did not receive all 10 records")
	require.Equal(t, map[int32]bool{0: true, 1: true}, watch.pausedNow(), "both partitions are paused at 5 held")
	before := c.CommitLog().All()
	require.NotEmpty(t, before)
	memberA := before[0].Member
	for _, cm := range before {
		require.Equal(t, memberA, cm.Member, "only A commits before B joins")
	}

	// Member B: when it is assigned the moved partition, A's revoke has returned: snapshot the log.
	var (
		bMu         sync.Mutex
		bAssignLog  = map[int32][]kfaketest.Commit{}
		bAssignSeen bool
	)
	obsB := &observer{}
	obsB.onRebal = func(e runtime.RebalancedEvent) {
		if e.Kind != "assigned" {
			return
		}
		bMu.Lock()
		defer bMu.Unlock()
		for _, p := range e.Partitions["in"] {
			if _, ok := bAssignLog[p]; !ok {
				bAssignLog[p] = c.CommitLog().Of("g", "in", p)
				bAssignSeen = true
			}
		}
	}
	_, bLog := startLogging(t, c, sub, []runtime.Option{runtime.Observe(obsB)}, runtime.Workers(2))

	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 5, 1: 5})
	waitClosed(t, revoked, "A was never revoked a partition")

	// Exactly one partition moved.
	px, py := watch.movedOne(t, "in")

	// A handled 0,1,2 of the moved partition (3 and 4 were dropped from its queue) and all of the
	// other; B handled exactly 3 and 4 of the moved partition, starting at A's commit.
	require.Equal(t, []int64{0, 1, 2}, aLog.offsets(px), "A's handler calls on the moved partition %d", px)
	require.Equal(t, []int64{0, 1, 2, 3, 4}, aLog.offsets(py), "A's handler calls on the kept partition %d", py)
	require.Equal(t, []int64{3, 4}, bLog.offsets(px), "B's handler calls on the moved partition %d", px)
	require.Empty(t, bLog.offsets(py), "B's handler calls on the kept partition %d", py)

	// A committed 3 for the moved partition before its revoke returned: it is the last commit of
	// the partition when B is assigned it, and it is A's.
	bMu.Lock()
	require.True(t, bAssignSeen)
	atAssign, ok := bAssignLog[px]
	bMu.Unlock()
	require.True(t, ok, "B was never assigned partition %d", px)
	require.NotEmpty(t, atAssign)
	last := atAssign[len(atAssign)-1]
	require.Equal(t, int64(3), last.Offset, "last commit of partition %d when B got it: %v", px, offsetsOf(atAssign))
	require.Equal(t, memberA, last.Member, "the commit of 3 is A's")
	for _, cm := range c.CommitLog().Of("g", "in", px) {
		if cm.Member == memberA {
			require.LessOrEqual(t, cm.Offset, int64(3), "A never commits past what it handled on %d", px)
		}
	}

	requireNonDecreasing(t, c, "g", "in", 0, 1)
	require.Equal(t, map[int32]int64{0: 5, 1: 5}, c.Committed(t, "g", "in"))
	require.False(t, watch.pausedNow()[px], "the revoke resumed the moved partition")
}

// A completion of a delivery taken before its partition was revoked is a silent no-op: the member
// commits nothing for it, not even once the partition comes back to it in a new generation, whose
// position starts at the group's commit and waits for the new generation's own records; the old
// handler's ctx is cancelled once the revoke's drain bound passed (DESIGN §3.1, §3.7).
func TestLateCompletionAfterRevokeCommitsNothing(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 2))
	for p := range int32(2) {
		var vs []string
		for i := range 5 {
			vs = append(vs, fmt.Sprintf("p%d-%d", p, i))
		}
		c.ProduceValues(t, "in", p, vs...)
	}
	sub := runtime.Topic("in").Group("g").Commit(runtime.Tracked)

	var (
		mu          sync.Mutex
		revokedEv   runtime.RebalancedEvent
		reassignSeq = -1 // commit log length when A got the moved partition back
		oldGen      = map[int32]uint64{}
		oldCtxErr   = map[int32]error{}
		newGen      uint64
	)
	revoked := make(chan struct{})
	reassigned := make(chan struct{})
	releaseOld := map[int32]*gate{0: newGate(), 1: newGate()}
	startedOld := map[int32]chan struct{}{0: make(chan struct{}), 1: make(chan struct{})}
	returnedOld := map[int32]chan struct{}{0: make(chan struct{}), 1: make(chan struct{})}
	startedNew := make(chan struct{})
	releaseNew := newGate()

	obsA := &observer{}
	obsA.onRebal = func(e runtime.RebalancedEvent) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case e.Kind == "revoked" && len(e.Partitions) > 0 && revokedEv.Kind == "":
			revokedEv = e
			close(revoked)
		case e.Kind == "assigned" && revokedEv.Kind != "" && reassignSeq < 0:
			if slices.Contains(e.Partitions["in"], revokedEv.Partitions["in"][0]) {
				reassignSeq = len(c.CommitLog().All())
				close(reassigned)
			}
		}
	}
	var aLog handledLog
	appA := runtime.New(appOpts(c, runtime.Observe(obsA), runtime.RevokeDrainTimeout(300*time.Millisecond))...)
	runtime.Handle(appA, sub, runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
		aLog.add(d)
		p, off := d.Record().Partition, d.Record().Offset
		mu.Lock()
		_, again := oldGen[p]
		if off == 1 && !again {
			oldGen[p] = d.Generation()
		}
		mu.Unlock()
		switch {
		case off == 1 && !again: // the old generation's record: ignores ctx until released
			close(startedOld[p])
			<-releaseOld[p].ch
			mu.Lock()
			oldCtxErr[p] = context.Cause(ctx)
			mu.Unlock()
			close(returnedOld[p])
		case off == 5: // the new generation's record on the moved partition
			mu.Lock()
			newGen = d.Generation()
			mu.Unlock()
			close(startedNew)
			<-releaseNew.ch
		}
		return nil
	}), runtime.Workers(2), runtime.ByPartition)
	start(t, appA)
	// Runs before appA's stop (cleanups run last-in first-out): the handlers ignore their ctx.
	t.Cleanup(func() { releaseOld[0].open(); releaseOld[1].open(); releaseNew.open() })

	waitClosed(t, startedOld[0], "A never handled (0,1)")
	waitClosed(t, startedOld[1], "A never handled (1,1)")
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1, 1: 1})
	memberA := c.CommitLog().All()[0].Member

	appB, bLog := startLogging(t, c, sub, nil, runtime.Workers(2))

	waitClosed(t, revoked, "A was never revoked a partition")
	mu.Lock()
	moved := partitionsOf(revokedEv, "in")
	mu.Unlock()
	require.Len(t, moved, 1, "cooperative-sticky moves exactly one partition: %v", revokedEv)
	px, py := moved[0], 1-moved[0]

	// A's drain timed out with (px,1) still running: A committed 1, and B took over from there.
	c.WaitCommitted(t, "g", "in", map[int32]int64{px: 5, py: 1})
	require.Equal(t, []int64{1, 2, 3, 4}, bLog.offsets(px), "B's handler calls on the moved partition")
	require.Empty(t, bLog.offsets(py))
	// A's last commit for the moved partition is 1, and none passed it. (An earlier one may be 0:
	// a commit tick while record 0 was still in flight marks where the partition started.)
	var aOffsets []int64
	for _, cm := range c.CommitLog().Of("g", "in", px) {
		if cm.Member == memberA {
			aOffsets = append(aOffsets, cm.Offset)
		}
	}
	require.NotEmpty(t, aOffsets)
	require.Equal(t, int64(1), aOffsets[len(aOffsets)-1], "A's commits for the moved partition: %v", aOffsets)
	require.LessOrEqual(t, slices.Max(aOffsets), int64(1), "A's commits for the moved partition: %v", aOffsets)

	// B leaves: px comes back to A in a new generation while A's old handler for (px,1) still runs.
	stop(t, appB)
	waitClosed(t, reassigned, "partition %d never came back to A", px)
	recs := c.ProduceValues(t, "in", px, fmt.Sprintf("p%d-5", px))
	require.Equal(t, int64(5), recs[0].Offset)

	// The old completion of (px,1) arrives now; then py's old record finishes too, so A's committer
	// has run and franz-go's autocommit has sent py's progress: anything the old completion had
	// marked for px would be in the log by then.
	releaseOld[px].open()
	waitClosed(t, returnedOld[px], "A's old handler for (%d,1) did not return", px)
	releaseOld[py].open()
	c.WaitCommitted(t, "g", "in", map[int32]int64{px: 5, py: 5})
	waitClosed(t, startedNew, "A never handled (%d,5) in the new generation", px)
	mu.Lock()
	seq := reassignSeq
	mu.Unlock()
	for _, cm := range c.CommitLog().Of("g", "in", px) {
		if cm.Seq >= seq {
			require.Equal(t, int64(5), cm.Offset,
				"before the new generation's (px,5) is released, every commit for px after the reassignment is 5 (seq %d, member %s)", cm.Seq, cm.Member)
		}
	}

	releaseNew.open()
	c.WaitCommitted(t, "g", "in", map[int32]int64{px: 6, py: 5})
	var after []int64
	for _, cm := range c.CommitLog().Of("g", "in", px) {
		if cm.Seq >= seq {
			require.Equal(t, memberA, cm.Member, "only A commits px after the reassignment")
			after = append(after, cm.Offset)
		}
	}
	require.NotEmpty(t, after)
	for _, o := range after {
		require.Contains(t, []int64{5, 6}, o, "commits for px after the reassignment: %v", after)
	}
	require.Equal(t, int64(6), after[len(after)-1])
	requireNonDecreasing(t, c, "g", "in", 0, 1)

	mu.Lock()
	defer mu.Unlock()
	require.EqualError(t, oldCtxErr[px], "tidemark: partition revoked and its drain bound passed",
		"the old handler's ctx is cancelled once the drain bound passed, and its cause says so")
	require.NoError(t, oldCtxErr[py], "the kept partition's handler ctx is not cancelled")
	require.NotEqual(t, oldGen[px], newGen, "old and new deliveries of px have different generations")
	require.Equal(t, []int64{0, 1, 5}, aLog.offsets(px), "A's handler calls on px: 0,1 in the old generation, 5 in the new")
	require.Equal(t, []int64{0, 1, 2, 3, 4}, aLog.offsets(py))
}

// waitClosed waits (up to kfaketest.WaitTimeout) for ch to be closed.
func waitClosed(t *testing.T, ch <-chan struct{}, msg string, args ...any) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(kfaketest.WaitTimeout):
		t.Fatalf(msg, args...)
	}
}

// A gate is a channel closed at most once, by open.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// wait returns true once the gate is open, false if ctx ends first.
func (g *gate) wait(ctx context.Context) bool {
	select {
	case <-g.ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// pauseObserver is observer with a hook on Paused events.
type pauseObserver struct {
	*observer
	onPaused func(runtime.PausedEvent)
}

func (o *pauseObserver) Paused(e runtime.PausedEvent) {
	o.observer.Paused(e)
	if o.onPaused != nil {
		o.onPaused(e)
	}
}

// A handler's ctx is its partition's: it stays live after the handler returns, and its cause
// says why it ended. A revoke whose drain finished ends it with "partition revoked", not the
// drain bound's cause (helper-121: every revoke named the bound); so does leaving the group at a
// clean Shutdown; a Partitions subscription's ends with "app stopped".
func TestAHandlersCtxEndsWithWhyItEnded(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 2), kfaketest.Topic("m", 1))
	c.ProduceValues(t, "in", 0, "a")
	c.ProduceValues(t, "in", 1, "b")
	c.ProduceValues(t, "m", 0, "c")
	var mu sync.Mutex
	ctxs := map[string]context.Context{}
	keep := runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		ctxs[fmt.Sprintf("%s/%d", d.Record().Topic, d.Record().Partition)] = ctx
		return nil
	})
	ctxOf := func(k string) context.Context {
		mu.Lock()
		defer mu.Unlock()
		return ctxs[k]
	}
	causeWithin := func(k string) error {
		t.Helper()
		select {
		case <-ctxOf(k).Done():
			return context.Cause(ctxOf(k))
		case <-time.After(kfaketest.WaitTimeout):
			t.Fatalf("the ctx of %s never ended", k)
			return nil
		}
	}
	watch := newRevokeWatch()
	obs := &observer{}
	obs.onRebal = watch.onRebal
	appA := runtime.New(appOpts(c, runtime.Observe(obs))...)
	sub := runtime.Topic("in").Group("g").Commit(runtime.Tracked)
	runtime.Handle(appA, sub, keep)
	runtime.Handle(appA, runtime.Partitions("m", 0), keep, runtime.RetryToSource())
	start(t, appA)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1, 1: 1})
	require.Eventually(t, func() bool { return ctxOf("m/0") != nil }, kfaketest.WaitTimeout, time.Millisecond)
	for _, k := range []string{"in/0", "in/1", "m/0"} {
		require.NoError(t, ctxOf(k).Err(), "%s: live after its handler returned", k)
	}

	startLogging(t, c, sub, nil)
	waitClosed(t, watch.revoked, "A was never revoked a partition")
	moved, kept := watch.movedOne(t, "in")
	require.EqualError(t, causeWithin(fmt.Sprintf("in/%d", moved)), "tidemark: partition revoked")
	require.NoError(t, ctxOf(fmt.Sprintf("in/%d", kept)).Err(), "the kept partition's ctx is live")

	stop(t, appA)
	require.EqualError(t, causeWithin(fmt.Sprintf("in/%d", kept)), "tidemark: partition revoked")
	require.EqualError(t, causeWithin("m/0"), "tidemark: app stopped")
}
