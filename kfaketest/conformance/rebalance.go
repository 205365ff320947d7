package conformance

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
)

// rebalanceScenarios are DESIGN §3.7 (and §3.8's fail-fast): revokes, losses, shutdown, crashes.
func rebalanceScenarios() []scenario {
	return []scenario{
		{name: "§3.7 a revoke commits what finished before the next owner starts there", run: revokeCommitsBeforeHandover},
		{name: "§3.7 a completion after its partition was revoked commits nothing", needs: "the commit log", run: lateCompletionAfterRevoke},
		{name: "§3.7 a lost partition commits nothing and cancels its handlers", needs: "an injected heartbeat fault", run: lostPartition},
		{name: "§3.7 Shutdown drains within its bound, then cancels handlers; the unfinished stays uncommitted", run: shutdownBound},
		{name: "§3.7 Run returns nil after its ctx ends, having committed what finished", run: runStopsCleanly},
		{name: "§3.7 a panic fails fast: Run returns a *PanicError and the record stays uncommitted", run: panicFailsFast},
		{name: "§3.7 a SIGKILLed Tracked consumer resumes at the lowest offset in flight", run: trackedCrash, child: trackedCrashChild},
	}
}

// Member A handles two partitions; offset 2 of each blocks until A is revoked one of them. Member
// B joins: A stops dispatching the moved partition (3 and 4 never start in A), waits for offset 2,
// commits 3 before its revoke returns, and B starts exactly there. Nothing handled twice, nothing
// lost, commits never go back.
func revokeCommitsBeforeHandover(e *env) {
	in, g := e.topic("in", 2), e.name("g")
	for p := range int32(2) {
		e.values(in, p, seq(fmt.Sprintf("p%d-", p), 5)...)
	}
	sub := runtime.Topic(in).Group(g).Commit(runtime.Tracked)

	revoked := newGate()
	var (
		mu        sync.Mutex
		revokedEv runtime.RebalancedEvent
		pausedA   = map[int32]bool{}
	)
	obsA := &pauseObserver{observer: &observer{}}
	obsA.onRebal = func(ev runtime.RebalancedEvent) {
		if ev.Kind == "revoked" && len(ev.Partitions) > 0 {
			mu.Lock()
			if revokedEv.Kind == "" {
				revokedEv = ev
			}
			mu.Unlock()
			revoked.open()
		}
	}
	obsA.onPaused = func(ev runtime.PausedEvent) {
		mu.Lock()
		defer mu.Unlock()
		pausedA[ev.Partition] = ev.Paused
	}
	var aCalls calls
	appA := e.app(runtime.Observe(obsA))
	runtime.Handle(appA, sub, runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
		aCalls.add(d)
		if d.Record().Offset == 2 {
			revoked.wait(ctx)
		}
		return nil
	}), runtime.Workers(2), runtime.MaxInFlightPerPartition(4))
	e.start(appA)

	// Before B joins: 0 and 1 done, 2 running, 3 and 4 queued, on both partitions, both paused.
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 2, 1: 2})
	e.eventually(func() bool {
		return slices.Equal(aCalls.offsetsOf(in, 0), []int64{0, 1, 2}) && slices.Equal(aCalls.offsetsOf(in, 1), []int64{0, 1, 2})
	}, "A is not blocked on offset 2 of both partitions: %v", aCalls.tagged())
	e.eventually(func() bool {
		obsA.mu.Lock()
		defer obsA.mu.Unlock()
		n := map[int32]int{}
		for _, ev := range obsA.delivered {
			n[ev.Partition] += ev.Records
		}
		return n[0] == 5 && n[1] == 5
	}, "A did not receive all 10 records")
	mu.Lock()
	require.Equal(e, map[int32]bool{0: true, 1: true}, pausedA, "both partitions are paused at 5 held")
	mu.Unlock()
	var memberA string
	if e.kfake("commits before the join") {
		before := e.c.CommitLog().All()
		require.NotEmpty(e, before)
		memberA = before[0].Member
		for _, cm := range before {
			require.Equal(e, memberA, cm.Member, "only A commits before B joins")
		}
	}

	// B: when it is assigned the moved partition, A's revoke has returned.
	var (
		bMu        sync.Mutex
		bAssignLog = map[int32][]kfaketest.Commit{}
	)
	obsB := &observer{}
	connected := e.c.Connected()
	obsB.onRebal = func(ev runtime.RebalancedEvent) {
		if ev.Kind != "assigned" || connected {
			return
		}
		bMu.Lock()
		defer bMu.Unlock()
		for _, p := range ev.Partitions[in] {
			if _, ok := bAssignLog[p]; !ok {
				bAssignLog[p] = e.c.CommitLog().Of(g, in, p)
			}
		}
	}
	var bCalls calls
	appB := e.app(runtime.Observe(obsB))
	runtime.Handle(appB, sub, runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
		bCalls.add(d)
		return nil
	}), runtime.Workers(2))
	e.start(appB)

	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 5, 1: 5})
	e.waitClosed(revoked.ch, "A was never revoked a partition")
	mu.Lock()
	moved := slices.Sorted(slices.Values(revokedEv.Partitions[in]))
	mu.Unlock()
	require.Len(e, moved, 1, "cooperative-sticky moves exactly one partition: %v", revokedEv)
	px, py := moved[0], 1-moved[0]

	require.Equal(e, []int64{0, 1, 2}, aCalls.offsetsOf(in, px), "A's calls on the moved partition %d", px)
	require.Equal(e, []int64{0, 1, 2, 3, 4}, aCalls.offsetsOf(in, py), "A's calls on the kept partition %d", py)
	require.Equal(e, []int64{3, 4}, bCalls.offsetsOf(in, px), "B starts exactly at A's commit on partition %d", px)
	require.Empty(e, bCalls.offsetsOf(in, py), "B's calls on the kept partition %d", py)
	mu.Lock()
	require.False(e, pausedA[px], "the revoke resumed the moved partition")
	mu.Unlock()

	if e.kfake("commit at the handover") {
		bMu.Lock()
		atAssign := bAssignLog[px]
		bMu.Unlock()
		require.NotEmpty(e, atAssign, "B was never assigned partition %d", px)
		last := atAssign[len(atAssign)-1]
		require.Equal(e, int64(3), last.Offset, "last commit of %d when B got it: %v", px, commitOffsets(atAssign))
		require.Equal(e, memberA, last.Member, "the commit of 3 is A's")
		for _, cm := range e.c.CommitLog().Of(g, in, px) {
			if cm.Member == memberA {
				require.LessOrEqual(e, cm.Offset, int64(3), "A never commits past what it handled on %d", px)
			}
		}
	}
	e.requireNonDecreasing(g, in, 0, 1)
	require.Equal(e, map[int32]int64{0: 5, 1: 5}, e.c.Committed(e, g, in))
}

// pauseObserver is observer with a hook on Paused events.
type pauseObserver struct {
	*observer
	onPaused func(runtime.PausedEvent)
}

func (o *pauseObserver) Paused(ev runtime.PausedEvent) {
	o.observer.Paused(ev)
	if o.onPaused != nil {
		o.onPaused(ev)
	}
}

// A's handler for offset 1 of each partition ignores its ctx until released. B joins and takes one
// partition after A's drain bound (300ms) passed: A commits 1 for it and nothing past it. B leaves; the
// partition comes back to A in a new generation while the old handler still runs; the old
// completion then arrives and changes nothing: every commit for the partition after the reassignment
// is 5 until the new generation's own record (offset 5) finishes, then 6. The old handler's ctx
// was cancelled once the drain bound passed; the kept partition's was not.
func lateCompletionAfterRevoke(e *env) {
	in, g := e.topic("in", 2), e.name("g")
	for p := range int32(2) {
		e.values(in, p, seq(fmt.Sprintf("p%d-", p), 5)...)
	}
	sub := runtime.Topic(in).Group(g).Commit(runtime.Tracked)
	var (
		mu          sync.Mutex
		revokedEv   runtime.RebalancedEvent
		reassignSeq = -1
		oldGen      = map[int32]uint64{}
		oldCtxErr   = map[int32]error{}
		newGen      uint64
	)
	revoked, reassigned := newGate(), newGate()
	releaseOld := map[int32]*gate{0: newGate(), 1: newGate()}
	startedOld := map[int32]*gate{0: newGate(), 1: newGate()}
	returnedOld := map[int32]*gate{0: newGate(), 1: newGate()}
	startedNew, releaseNew := newGate(), newGate()

	obsA := &observer{}
	obsA.onRebal = func(ev runtime.RebalancedEvent) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case ev.Kind == "revoked" && len(ev.Partitions) > 0 && revokedEv.Kind == "":
			revokedEv = ev
			revoked.open()
		case ev.Kind == "assigned" && revokedEv.Kind != "" && reassignSeq < 0:
			if slices.Contains(ev.Partitions[in], revokedEv.Partitions[in][0]) {
				reassignSeq = len(e.c.CommitLog().All())
				reassigned.open()
			}
		}
	}
	var aCalls calls
	appA := e.app(runtime.Observe(obsA), runtime.RevokeDrainTimeout(300*time.Millisecond))
	runtime.Handle(appA, sub, runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
		aCalls.add(d)
		p, off := d.Record().Partition, d.Record().Offset
		mu.Lock()
		_, again := oldGen[p]
		if off == 1 && !again {
			oldGen[p] = d.Generation()
		}
		mu.Unlock()
		switch {
		case off == 1 && !again: // the old generation's record: ignores ctx until released
			startedOld[p].open()
			<-releaseOld[p].ch
			mu.Lock()
			oldCtxErr[p] = ctx.Err()
			mu.Unlock()
			returnedOld[p].open()
		case off == 5: // the new generation's record on the moved partition
			mu.Lock()
			newGen = d.Generation()
			mu.Unlock()
			startedNew.open()
			<-releaseNew.ch
		}
		return nil
	}), runtime.Workers(2))
	e.start(appA)
	// Runs before appA's stop (cleanups run last-in first-out): the handlers ignore their ctx.
	e.Cleanup(func() { releaseOld[0].open(); releaseOld[1].open(); releaseNew.open() })

	e.waitClosed(startedOld[0].ch, "A never handled (0,1)")
	e.waitClosed(startedOld[1].ch, "A never handled (1,1)")
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 1, 1: 1})
	memberA := e.c.CommitLog().All()[0].Member

	var bCalls calls
	appB := e.app()
	runtime.Handle(appB, sub, runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
		bCalls.add(d)
		return nil
	}), runtime.Workers(2))
	e.start(appB)
	e.waitClosed(revoked.ch, "A was never revoked a partition")
	mu.Lock()
	moved := slices.Sorted(slices.Values(revokedEv.Partitions[in]))
	mu.Unlock()
	require.Len(e, moved, 1, "cooperative-sticky moves exactly one partition: %v", revokedEv)
	px, py := moved[0], 1-moved[0]

	e.c.WaitCommitted(e, g, in, map[int32]int64{px: 5, py: 1})
	require.Equal(e, []int64{1, 2, 3, 4}, bCalls.offsetsOf(in, px), "B's calls on the moved partition")
	require.Empty(e, bCalls.offsetsOf(in, py))
	// A's last commit for the moved partition is 1, and none passed it. (An earlier one may be 0:
	// a commit tick while record 0 was still in flight marks where the partition started.)
	var aOffsets []int64
	for _, cm := range e.c.CommitLog().Of(g, in, px) {
		if cm.Member == memberA {
			aOffsets = append(aOffsets, cm.Offset)
		}
	}
	require.NotEmpty(e, aOffsets)
	require.Equal(e, int64(1), aOffsets[len(aOffsets)-1], "A's commits for the moved partition: %v", aOffsets)
	require.LessOrEqual(e, slices.Max(aOffsets), int64(1), "A's commits for the moved partition: %v", aOffsets)

	e.stop(appB)
	e.waitClosed(reassigned.ch, "partition %d never came back to A", px)
	recs := e.values(in, px, fmt.Sprintf("p%d-5", px))
	require.Equal(e, int64(5), recs[0].Offset)
	releaseOld[px].open()
	e.waitClosed(returnedOld[px].ch, "A's old handler for (%d,1) did not return", px)
	releaseOld[py].open()
	e.c.WaitCommitted(e, g, in, map[int32]int64{px: 5, py: 5})
	e.waitClosed(startedNew.ch, "A never handled (%d,5) in the new generation", px)
	mu.Lock()
	seqAt := reassignSeq
	mu.Unlock()
	for _, cm := range e.c.CommitLog().Of(g, in, px) {
		if cm.Seq >= seqAt {
			require.Equal(e, int64(5), cm.Offset, "a commit for %d after the reassignment, before (px,5) finished: %+v", px, cm)
		}
	}
	releaseNew.open()
	e.c.WaitCommitted(e, g, in, map[int32]int64{px: 6, py: 5})
	var after []int64
	for _, cm := range e.c.CommitLog().Of(g, in, px) {
		if cm.Seq >= seqAt {
			require.Equal(e, memberA, cm.Member, "only A commits px after the reassignment")
			after = append(after, cm.Offset)
		}
	}
	require.NotEmpty(e, after)
	for _, o := range after {
		require.Contains(e, []int64{5, 6}, o, "commits for px after the reassignment: %v", after)
	}
	require.Equal(e, int64(6), after[len(after)-1])
	e.requireNonDecreasing(g, in, 0, 1)
	mu.Lock()
	defer mu.Unlock()
	require.Error(e, oldCtxErr[px], "the old handler's ctx is cancelled once the drain bound passed")
	require.NoError(e, oldCtxErr[py], "the kept partition's handler ctx is not cancelled")
	require.NotEqual(e, oldGen[px], newGen, "old and new deliveries of px have different generations")
	require.Equal(e, []int64{0, 1, 5}, aCalls.offsetsOf(in, px))
	require.Equal(e, []int64{0, 1, 2, 3, 4}, aCalls.offsetsOf(in, py))
}

// A failed heartbeat makes the member lose its partition: the running handler's ctx is cancelled
// ("partition lost"), its late ack commits nothing, and the partition is read again from the
// committed offset in the next generation.
func lostPartition(e *env) {
	in, g := e.topic("in", 1), e.name("g")
	e.values(in, 0, "a", "b", "c")
	blocked := newGate()
	cause := make(chan error, 1)
	obs := &observer{}
	var got calls
	app := e.app(runtime.Observe(obs))
	runtime.Handle(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			got.add(d)
			if string(d.Record().Value) == "b" && d.Generation() == 1 {
				blocked.open()
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return nil // an ack that arrives too late to count
			}
			return nil
		}))
	e.start(app)
	e.waitClosed(blocked.ch, "b never started")
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 1})
	e.c.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Group: g, Err: kerr.UnknownMemberID})
	select {
	case err := <-cause:
		require.ErrorContains(e, err, "partition lost")
	case <-time.After(20 * time.Second):
		e.Fatal("the handler's ctx was never cancelled")
	}
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 3})
	e.stop(app)
	var tagged []string
	for _, x := range got.all() {
		tagged = append(tagged, fmt.Sprintf("%s@gen%d", x.rec.Value, x.gen))
	}
	require.Equal(e, []string{"a@gen1", "b@gen1", "b@gen2", "c@gen2"}, tagged)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	var kinds []string
	for _, ev := range obs.rebal {
		kinds = append(kinds, ev.Kind)
	}
	require.Equal(e, []string{"assigned", "lost", "assigned", "revoked"}, kinds)
}

// Shutdown drains running handlers within its ctx; only past that bound is a handler's ctx
// cancelled (with the bound as its cause), Shutdown reports the deadline, and the unfinished record
// is not committed while the finished one is.
func shutdownBound(e *env) {
	in, g := e.topic("in", 1), e.name("g")
	e.values(in, 0, "fast", "stuck")
	running := newGate()
	cause := make(chan error, 1)
	app := e.app()
	runtime.Handle(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if string(d.Record().Value) == "fast" {
				return nil
			}
			running.open()
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(e, app.Start(ctx))
	e.waitClosed(running.ch, "stuck never started")
	sctx, scancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer scancel()
	err := app.Shutdown(sctx)
	require.ErrorIs(e, err, context.DeadlineExceeded, "the drain bound passed")
	require.ErrorContains(e, <-cause, "shutdown bound passed")
	require.Equal(e, map[int32]int64{0: 1}, e.c.Committed(e, g, in), "the stuck record stays uncommitted")
}

// Run returns nil once its ctx ends and everything has stopped; the App reports Stopped and the
// handled record is committed.
func runStopsCleanly(e *env) {
	in, g := e.topic("in", 1), e.name("g")
	e.values(in, 0, "a")
	app := e.app(runtime.DefaultGroup(g))
	handled := newGate()
	runtime.Handle(app, runtime.Topic(in).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error { handled.open(); return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	e.waitClosed(handled.ch, "record not handled")
	cancel()
	select {
	case err := <-errc:
		require.NoError(e, err)
	case <-time.After(30 * time.Second):
		e.Fatal("Run did not return")
	}
	state, reason := app.State()
	require.Equal(e, runtime.StateStopped, state)
	require.NoError(e, reason)
	require.Equal(e, map[int32]int64{0: 1}, e.c.Committed(e, g, in))
	<-app.Done()
}

// A handler panic under the default policy fails fast: Run returns a *PanicError naming the value,
// the record and a stack; in Tracked the records before it are committed and it is not.
func panicFailsFast(e *env) {
	in, g := e.topic("in", 1), e.name("g")
	e.values(in, 0, "0", "1", "boom", "3", "4")
	app := e.app()
	runtime.Handle(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			if string(d.Record().Value) == "boom" {
				panic("bad record")
			}
			return nil
		}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := app.Run(ctx)
	var perr *runtime.PanicError
	require.ErrorAs(e, err, &perr)
	require.Equal(e, "bad record", perr.Value)
	require.Equal(e, in, perr.Topic)
	require.Equal(e, int64(2), perr.Offset)
	require.NotEmpty(e, perr.Stack)
	require.Equal(e, map[int32]int64{0: 2}, e.c.Committed(e, g, in))
	state, reason := app.State()
	require.Equal(e, runtime.StateFailed, state)
	require.ErrorAs(e, reason, &perr)
}

// A Tracked consumer with four ByKey lanes is SIGKILLed while offset 5 of 20 blocks and the rest
// have returned: it had committed exactly 5. Restarted with the same instance id, it handles 5..19
// again and nothing before: every record without a return before the kill returns after it.
func trackedCrash(e *env) {
	const n = 20
	in, g := e.topic("in", 1), e.name("g")
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: in, Key: fmt.Appendf(nil, "k%02d", i), Value: fmt.Appendf(nil, "v%02d", i)})
	}
	e.c.ProduceTo(e, 0, recs...)
	p := e.c.Spawn(e, map[string]string{"in": in, "group": g})
	p.SetTimeout(30 * time.Second)
	p.WaitEvents(e, func(evs []kfaketest.Event) bool { return len(offsetsOf(evs, 1, kfaketest.EventReturn)) == n-1 })
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 5})
	p.Kill(e)
	if e.kfake("last commit before the kill") {
		before := e.c.CommitLog().Of(g, in, 0)
		require.NotEmpty(e, before)
		require.Equal(e, int64(5), before[len(before)-1].Offset, "commits of run 1: %v", commitOffsets(before))
		for _, cm := range before {
			require.Equal(e, p.InstanceID()+"-0", cm.InstanceID, "commits come from the static member")
		}
	}
	p.Restart(e)
	p.WaitEvents(e, func(evs []kfaketest.Event) bool { return slices.Contains(offsetsOf(evs, 2, kfaketest.EventReturn), 5) })
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: n})
	p.Kill(e)

	evs := p.Events()
	var all, from5 []int64
	for i := range int64(n) {
		all = append(all, i)
		if i >= 5 {
			from5 = append(from5, i)
		}
	}
	require.Equal(e, all, slices.Sorted(slices.Values(offsetsOf(evs, 1, kfaketest.EventStart))), "run 1 starts every record once")
	require.Equal(e, slices.DeleteFunc(slices.Clone(all), func(o int64) bool { return o == 5 }),
		slices.Sorted(slices.Values(offsetsOf(evs, 1, kfaketest.EventReturn))), "run 1 returns every record but 5")
	require.Equal(e, from5, slices.Sorted(slices.Values(offsetsOf(evs, 2, kfaketest.EventStart))), "run 2 starts at the commit (5) and handles 5..19 once each")
	require.Equal(e, from5, slices.Sorted(slices.Values(offsetsOf(evs, 2, kfaketest.EventReturn))))
	e.requireNonDecreasing(g, in, 0)
	require.Equal(e, map[int32]int64{0: n}, e.c.Committed(e, g, in))
}

func offsetsOf(evs []kfaketest.Event, run int, kind string) []int64 {
	var out []int64
	for _, ev := range evs {
		if ev.Run == run && ev.Kind == kind {
			out = append(out, ev.Offset)
		}
	}
	return out
}

// trackedCrashChild is trackedCrash's consumer: Tracked, four ByKey lanes, logging each record's
// start and return; in run 1 offset 5 never returns. It runs until killed.
func trackedCrashChild(t *testing.T, env kfaketest.ChildEnv) {
	app := runtime.New(
		runtime.Brokers(env.Brokers...),
		runtime.ClientOpts(env.ClientOpts()...),
		runtime.InstanceID(env.InstanceID),
		runtime.Logger(logger()),
	)
	runtime.Handle(app, runtime.Topic(env.Args["in"]).Group(env.Args["group"]).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			r := d.Record()
			env.Log.Start(r.Topic, r.Partition, r.Offset, d.Attempt())
			if env.Run == 1 && r.Offset == 5 {
				<-ctx.Done() // until the SIGKILL
				return ctx.Err()
			}
			env.Log.Return(r.Topic, r.Partition, r.Offset, "ack")
			return nil
		}), runtime.Workers(4), runtime.ByKey)
	err := app.Run(context.Background())
	t.Fatalf("child run %d: Run returned: %v", env.Run, err)
}
