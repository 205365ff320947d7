package runtime

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/batch"
	"github.com/tidemark-io/tidemark/retry"
	"github.com/tidemark-io/tidemark/tracker"
	"github.com/twmb/franz-go/pkg/kgo"
)

// tp names a topic partition.
type tp struct {
	topic     string
	partition int32
}

// partState is one owned partition in one assignment generation. Fields without a comment are
// guarded by dispatcher.mu.
type partState struct {
	tp
	gen    uint64             // immutable: the runtime's assignment generation
	trk    *tracker.Partition // immutable; nil under Auto
	ctx    context.Context    // immutable: the handlers' ctx, cancelled on lost or a passed bound
	cancel context.CancelCauseFunc
	closed atomic.Bool // set once revoked, lost or shut down: nothing more is dispatched
	sealed atomic.Bool // set under markMu by its final marks (revoke, shutdown) or its loss: no more marks

	held      int              // records held: queued, running, parked
	handling  int              // records in a handler right now
	paused    bool             // back-pressure: the partition gets no more records (DESIGN §3.6)
	holdsPoll bool             // paused by holding the poll loop off, not (yet) in franz-go
	delayed   time.Time        // Transactional: paused until then for a retry copy not yet due
	single    *unit            // ByPartition, and keyless records under ByKey
	keys      map[string]*unit // ByKey
	taken     int64            // Auto manual partitions: next offset after the highest record handled, -1 before any

	// guarded by dispatcher.mu, used by the committer
	oldest      int64     // Tracked: the oldest in-flight offset last seen, for InFlightEvent.OldestAge
	oldestSince time.Time // when it was first seen
	lastTaken   int64     // Auto manual partitions: the position last handed to kadm
}

// A unit is what must be handled in order, one take at a time: a partition, a key, or (Unordered,
// and retry copies) a single record.
type unit struct {
	ps      *partState
	key     string
	keyed   bool
	q       []*item
	taken   int           // records of the current take not yet finished
	retry   []*item       // records of the current take waiting for an in-place retry, in order
	wait    time.Duration // the longest backoff among retry
	one     [1]*item      // q's first array, for a unit of one record
	parked  bool          // the head waits for a timer (a retry, or a copy not yet due)
	blocked bool          // the head panicked under PanicFail: nothing behind it runs
	ready   bool          // listed in dispatcher.ready
}

func (u *unit) busy() bool { return u.taken > 0 || u.parked || u.blocked }

// An item is one held record. Items are allocated in a slab per poll and partition (push), so
// keep them small: 72 bytes.
type item struct {
	rec     *kgo.Record
	ps      *partState
	u       *unit
	timer   *time.Timer
	win     *txnWindow // Transactional: the window (transaction) the record was polled in
	slot    tracker.Delivery
	wait    time.Duration // actPark: the backoff (set by the lane that handled it)
	inPlace int32         // in-place retries so far
	act     action        // how finishTake finishes it (set by the lane that handled it)
	control bool          // a transaction marker: settled without the handler
	foreign bool          // a retry copy made by another group: settled without the handler
	alone   bool          // handled out of order, in a unit of its own (retry copies, foreign copies)
}

type action uint8

const (
	actDone action = iota // settled: no longer held
	actPark               // back to the head of its unit after a wait
	actHold               // stays held and blocks its unit (a panic under PanicFail)
)

// dispatcher holds a subscription's partition queues and hands ready units to lanes. The poll loop
// only queues under mu and never blocks; lanes wait on cond.
type dispatcher struct {
	c        *consumer
	ordering Ordering
	perPart  int
	maxAll   int

	mu        sync.Mutex
	cond      sync.Cond
	parts     map[tp]*partState
	ready     []*unit
	rhead     int
	held      int
	handling  int // records in a handler, all partitions (detached ones included)
	allPaused bool
	stopping  atomic.Bool // set by stop, read by lanes between the records of a take
	holding   int         // paused partitions not paused in franz-go: the poll loop does not poll
	idle      int         // lanes waiting for a ready unit
	pollWake  chan struct{}
	stopped   bool
	parked    map[*item]struct{}
	waiters   int
	changed   chan struct{}
	win       *txnWindow // Transactional: the window records are polled into
	recs      int64      // records polled, and the bytes of their keys, values, headers
	recBytes  int64
	fetchCl   *kgo.Client              // the client fetchMax and partMax were read from
	fetchMax  int32                    // its FetchMaxBytes
	partMax   int32                    // its FetchMaxPartitionBytes, as lowered by adaptFetchLocked
	timers    map[*time.Timer]struct{} // Transactional: partition delays
}

func newDispatcher(c *consumer) *dispatcher {
	d := &dispatcher{
		c:        c,
		ordering: c.cfg.ordering,
		perPart:  c.cfg.maxInFlightPerPart,
		maxAll:   c.cfg.maxInFlight,
		parts:    make(map[tp]*partState),
		parked:   make(map[*item]struct{}),
		timers:   make(map[*time.Timer]struct{}),
		changed:  make(chan struct{}),
		pollWake: make(chan struct{}, 1),
	}
	d.cond.L = &d.mu
	return d
}

// add registers a newly owned partition. Called from the assign callback, or at start for manual
// partitions.
func (d *dispatcher) add(ps *partState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old := d.parts[ps.tp]; old != nil {
		d.dropLocked(old)
	}
	d.parts[ps.tp] = ps
	d.flowLocked(ps)
	d.wakePollLocked() // a held poll loop may now have a partition to poll for
}

// push queues one poll's records. It never blocks on a lane. It returns ErrTrackerFull if a
// partition's tracker ring overflowed (a bug in pausing), which is fatal.
func (d *dispatcher) push(fs kgo.Fetches) ([]DeliveredEvent, bool, error) {
	var (
		events []DeliveredEvent
		moved  bool
		err    error
	)
	d.mu.Lock()
	ready := d.readyLen()
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 || err != nil {
			return
		}
		key := tp{p.Topic, p.Partition}
		ps := d.parts[key]
		if ps == nil {
			ps = d.c.newPart(key)
			d.parts[key] = ps
		}
		n := 0
		now := time.Now()
		d.recs += int64(len(p.Records))
		slab := make([]item, len(p.Records)) // one allocation for the poll's records of a partition
		var units []unit                     // Unordered: their units, one allocation too
		if d.ordering == Unordered {
			units = make([]unit, len(p.Records))
		}
		for i, r := range p.Records {
			it := &slab[i]
			it.rec, it.ps, it.control = r, ps, r.Attrs.IsControl()
			d.recBytes += int64(len(r.Key) + len(r.Value))
			for _, h := range r.Headers {
				d.recBytes += int64(len(h.Key) + len(h.Value))
			}
			var due time.Duration
			if !it.control {
				if g := retry.GroupOf(r); g != "" {
					it.alone = true // a copy is out of order by nature (DESIGN §3.3)
					it.foreign = g != d.c.group
					if nb, ok := retry.NotBefore(r); ok && !it.foreign {
						due = nb.Sub(now)
					}
				}
			}
			if ps.trk != nil {
				slot, derr := ps.trk.Deliver(r.Offset, r.LeaderEpoch)
				if derr != nil {
					err = derr
					return
				}
				it.slot = slot
				if it.control { // DESIGN §3.7a: markers are settled by the runtime itself
					moved = ps.trk.Complete(slot) == tracker.Completed || moved
					continue
				}
			}
			if d.win != nil {
				if d.win.w.Aborted() != nil {
					return // the whole window is read again
				}
				if due > 0 { // DESIGN §3.4: abort once, pause the partition until the copy is due
					d.win.w.Abort(errCopyNotDue)
					d.delayLocked(ps, now.Add(due))
					return
				}
				it.win = d.win
				d.win.w.Add(1)
			}
			if due > 0 {
				d.parkLocked(it, due)
			} else {
				var own *unit
				if units != nil {
					own = &units[i]
				}
				d.enqueueLocked(it, own)
			}
			n++
		}
		events = append(events, DeliveredEvent{Group: d.c.group, Topic: p.Topic, Partition: p.Partition, Records: n, InFlight: ps.held})
		d.flowLocked(ps)
	})
	d.flowAllLocked()
	wake := min(d.readyLen()-ready, d.idle)
	d.mu.Unlock()
	for range wake { // one idle lane per unit that became ready, woken outside the lock
		d.cond.Signal()
	}
	return events, moved, err
}

// enqueueLocked queues it in its unit. A record handled out of order gets a unit of its own:
// own, when the caller has one to spare (push allocates them per poll), else a new one.
func (d *dispatcher) enqueueLocked(it *item, own *unit) {
	ps := it.ps
	var u *unit
	switch {
	case d.ordering == Unordered || it.alone:
		if own == nil {
			own = new(unit)
		}
		u = own
		u.ps, u.q = ps, u.one[:0:1]
	case d.ordering == ByKey && it.rec.Key != nil && !it.control:
		u = ps.keys[string(it.rec.Key)]
		if u == nil {
			if ps.keys == nil {
				ps.keys = make(map[string]*unit)
			}
			u = &unit{ps: ps, key: string(it.rec.Key), keyed: true}
			ps.keys[u.key] = u
		}
	default:
		if ps.single == nil {
			ps.single = &unit{ps: ps}
		}
		u = ps.single
	}
	it.u = u
	u.q = append(u.q, it)
	ps.held++
	d.held++
	d.readyLocked(u)
}

// parkLocked holds a retry copy that is not yet due: its offset stays in flight, it holds back no
// other record, and a lane takes it once wait has passed (DESIGN §3.3).
func (d *dispatcher) parkLocked(it *item, wait time.Duration) {
	u := &unit{ps: it.ps, q: []*item{it}, parked: true}
	it.u = u
	it.ps.held++
	d.held++
	d.parked[it] = struct{}{}
	it.timer = time.AfterFunc(wait, func() { d.unpark(it) })
}

func (d *dispatcher) readyLocked(u *unit) {
	if u.busy() || u.ready || len(u.q) == 0 || u.ps.closed.Load() {
		return
	}
	u.ready = true
	d.ready = append(d.ready, u)
}

// take blocks until a unit is ready and returns its next records, at most n, appended to buf[:0]:
// the head and the records already queued behind it in the same unit (under Unordered, the next
// ready records of any partition), never empty and without waiting for more (DESIGN §3.5). False
// once the dispatcher is stopped.
func (d *dispatcher) take(buf []*item, n int) ([]*item, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.takeLocked(buf[:0], n)
}

func (d *dispatcher) takeLocked(items []*item, n int) ([]*item, bool) {
	for {
		if d.stopped {
			return nil, false
		}
		if items = d.grabLocked(items, n); len(items) > 0 {
			return items, true
		}
		d.idle++
		if d.holding > 0 {
			d.wakePollLocked() // lanes starve: the poll loop pauses the full partitions in franz-go
		}
		d.cond.Wait()
		d.idle--
	}
}

// grabLocked is take without the wait: it appends to items what is ready, maybe nothing.
func (d *dispatcher) grabLocked(items []*item, n int) []*item {
	items = items[:0]
	for d.rhead < len(d.ready) && len(items) < n {
		u := d.popReadyLocked()
		if u.busy() || len(u.q) == 0 || u.ps.closed.Load() {
			continue // stale entry
		}
		take, rest := batch.Cut(u.q, n-len(items))
		items = append(items, take...)
		clear(take)
		u.q = rest
		u.taken += len(take)
		u.ps.handling += len(take)
		d.handling += len(take)
		if d.ordering != Unordered {
			break // one unit of order per take
		}
	}
	if len(items) > 0 && d.holding > 0 && d.idle > 0 && d.readyLen() == 0 {
		d.wakePollLocked() // the other lanes starve: see waitRoom
	}
	return items
}

func (d *dispatcher) popReadyLocked() *unit {
	u := d.ready[d.rhead]
	d.ready[d.rhead] = nil
	d.rhead++
	if d.rhead == len(d.ready) {
		d.ready, d.rhead = d.ready[:0], 0
	}
	u.ready = false
	return u
}

// finishTake ends a lane's hold on a take whose first handled records ran; each one's act says
// how: actDone settles it; actPark puts it back at the head of its unit, which becomes ready again
// wait after its whole take has finished; actHold blocks the unit for good. The records after
// them were not handled: they go back to the head of their unit in order (behind a parked one),
// or are dropped, uncommitted, if they may no longer run (see runnable).
// Then it takes the lane's next records under the same lock (take's result, at most next, in
// items' array), so a lane with work waiting never parks.
func (d *dispatcher) finishTake(items []*item, handled, next int) ([]*item, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ready := d.readyLen()
	// Records not handled come from one unit (only a Handler's take stops early): back to its head.
	var back []*item
	for _, it := range items[handled:] {
		d.releaseLocked(it)
		if d.runnable(it) {
			back = append(back, it)
		} else {
			d.dropItemLocked(it)
		}
	}
	if len(back) > 0 {
		back[0].u.q = append(back, back[0].u.q...)
	}
	var last *partState
	for _, it := range items[:handled] {
		d.releaseLocked(it)
		d.finishLocked(it)
		if it.ps != last && last != nil {
			d.flowLocked(last)
		}
		last = it.ps
	}
	for _, it := range items[handled:] {
		if u := it.u; !u.busy() && len(u.q) > 0 {
			d.readyLocked(u)
		}
	}
	if last != nil {
		d.flowLocked(last)
	}
	d.flowAllLocked()
	d.notifyLocked()
	var grabbed []*item
	if !d.stopped {
		grabbed = d.grabLocked(items, next)
	}
	d.wakeLanesLocked(ready) // for what this lane did not take
	if len(grabbed) > 0 {
		return grabbed, true
	}
	return d.takeLocked(items[:0], next)
}

func (d *dispatcher) readyLen() int { return len(d.ready) - d.rhead }

// anyRunningLocked reports whether an owned partition is not paused: only then can a poll bring
// records a lane may take. With every partition paused, pausing them in franz-go would only drop
// the records they need next.
func (d *dispatcher) anyRunningLocked() bool {
	for _, ps := range d.parts {
		if !ps.paused {
			return true
		}
	}
	return false
}

// wakeLanesLocked wakes one idle lane for each unit that became ready since the ready list held
// before units: not every lane (with thousands of lanes, a broadcast per poll costs more than the
// handlers).
func (d *dispatcher) wakeLanesLocked(before int) {
	for range min(d.readyLen()-before, d.idle) {
		d.cond.Signal()
	}
}

// releaseLocked ends a lane's hold on it.
func (d *dispatcher) releaseLocked(it *item) {
	it.ps.handling--
	d.handling--
	it.u.taken--
}

// dropItemLocked lets go of a held record that will not run: it stays uncommitted.
func (d *dispatcher) dropItemLocked(it *item) {
	it.ps.held--
	d.held--
	if it.win != nil {
		it.win.w.Done()
	}
}

// runnable reports whether a taken record may still be handled: its partition is owned, the
// dispatcher is not stopping, and its Transactional window has not aborted.
func (d *dispatcher) runnable(it *item) bool {
	return !it.ps.closed.Load() && !d.stopping.Load() && (it.win == nil || it.win.w.Aborted() == nil)
}

// finishLocked applies a handled record's act.
func (d *dispatcher) finishLocked(it *item) {
	ps, u, act := it.ps, it.u, it.act
	if it.win != nil {
		it.win.w.Done()
		if act == actPark {
			act = actDone // nothing is parked across windows: the window aborts instead
		}
	}
	switch {
	case act == actHold:
		u.blocked = true
	case act == actPark && !ps.closed.Load() && !d.stopped:
		u.retry = append(u.retry, it)
		u.wait = max(u.wait, it.wait)
	default: // done, or a park that can no longer happen: the record stays uncommitted
		ps.held--
		d.held--
	}
	if ps.closed.Load() {
		return
	}
	if u.taken == 0 && len(u.retry) > 0 {
		first := u.retry[0]
		u.q = append(u.retry, u.q...)
		u.retry, u.parked = nil, true
		d.parked[first] = struct{}{}
		first.timer = time.AfterFunc(u.wait, func() { d.unpark(first) })
		u.wait = 0
	}
	if !u.busy() && len(u.q) > 0 {
		d.readyLocked(u)
	}
	if u.keyed && !u.busy() && len(u.q) == 0 {
		delete(ps.keys, u.key)
	}
}

func (d *dispatcher) unpark(it *item) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.parked[it]; !ok {
		return // dropped by a revoke, a loss or shutdown
	}
	delete(d.parked, it)
	it.u.parked = false
	d.readyLocked(it.u)
	d.cond.Signal()
}

// detach stops dispatching the given partitions: their queued and parked records are dropped (they
// stay uncommitted) and they are no longer listed; records in a handler keep running. It returns the
// detached states.
func (d *dispatcher) detach(tps map[string][]int32) []*partState {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*partState
	for topic, parts := range tps {
		for _, p := range parts {
			ps := d.parts[tp{topic, p}]
			if ps == nil {
				continue
			}
			d.dropLocked(ps)
			out = append(out, ps)
		}
	}
	d.flowAllLocked()
	return out
}

func (d *dispatcher) dropLocked(ps *partState) {
	delete(d.parts, ps.tp)
	ps.closed.Store(true)
	for it := range d.parked {
		if it.ps == ps {
			it.timer.Stop()
			delete(d.parked, it)
		}
	}
	queued := ps.held - ps.handling
	d.held -= queued
	ps.held = ps.handling
	if ps.single != nil {
		ps.single.q = nil
	}
	ps.keys = nil
	if ps.paused {
		d.resumeLocked(ps)
	}
	d.notifyLocked()
}

// stop ends dispatching: lanes return once their current record is done, parked records are dropped.
func (d *dispatcher) stop() {
	d.mu.Lock()
	d.stopped = true
	d.stopping.Store(true)
	for it := range d.parked {
		it.timer.Stop()
		delete(d.parked, it)
	}
	for t := range d.timers {
		t.Stop()
		delete(d.timers, t)
	}
	d.mu.Unlock()
	d.cond.Broadcast()
}

// owned returns the partitions currently owned.
func (d *dispatcher) owned() []*partState {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*partState, 0, len(d.parts))
	for _, ps := range d.parts {
		out = append(out, ps)
	}
	return out
}

// waitIdle waits until no record of pss (of every partition when pss is nil) is in a handler, or
// ctx ends.
func (d *dispatcher) waitIdle(ctx context.Context, pss []*partState) error {
	for {
		d.mu.Lock()
		idle := true
		if pss == nil {
			idle = d.handling == 0
		} else {
			for _, ps := range pss {
				idle = idle && ps.handling == 0
			}
		}
		if idle {
			d.mu.Unlock()
			return nil
		}
		d.waiters++
		ch := d.changed
		d.mu.Unlock()
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
		d.mu.Lock()
		d.waiters--
		d.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

func (d *dispatcher) notifyLocked() {
	if d.waiters > 0 {
		close(d.changed)
		d.changed = make(chan struct{})
	}
}

// flowLocked pauses a partition at its bound (held records, or the tracker's span; or while the
// whole subscription is over MaxInFlight, or a Transactional delay) and resumes it once it has
// drained to half (DESIGN §3.6).
//
// A pause first only holds the poll loop off (franz-go keeps the partition's buffered records);
// it becomes PauseFetchPartitions when a lane has nothing to do (waitRoom), since that
// makes franz-go drop the partition's buffered records, to fetch them again after the resume
// (docs/consumer-internals.md, back-pressure). A Transactional delay (a retry copy not yet due)
// pauses in franz-go at once: the copy must not be polled again before then.
func (d *dispatcher) flowLocked(ps *partState) {
	if ps.closed.Load() {
		return
	}
	delayed := !ps.delayed.IsZero() && time.Now().Before(ps.delayed)
	// The tracker's ring also fills behind a record stuck in flight (a parked copy, a slow key)
	// while later ones complete: its span is bounded like the held records, so Deliver never
	// finds it full (capacity = bound + one poll).
	span := 0
	if ps.trk != nil {
		span = ps.trk.Span()
	}
	switch {
	case !ps.paused && (ps.held >= d.perPart || span >= d.perPart || d.allPaused || delayed):
		ps.paused = true
		if delayed { // a copy not due must not be polled at all
			d.c.setPaused(ps.tp, true)
		} else {
			ps.holdsPoll = true
			d.holding++
			d.wakePollLocked() // the poll loop may be waiting already: it looks again
		}
		d.c.obs.Paused(PausedEvent{Group: d.c.group, Topic: ps.topic, Partition: ps.partition, Paused: true})
	case ps.paused && ps.held <= d.perPart/2 && span <= d.perPart/2 && !d.allPaused && !delayed:
		d.resumeLocked(ps)
	}
}

// resumeLocked ends a pause: in franz-go, or by letting the poll loop poll again.
func (d *dispatcher) resumeLocked(ps *partState) {
	ps.paused = false
	if ps.holdsPoll {
		ps.holdsPoll = false
		d.holding--
	} else {
		d.c.setPaused(ps.tp, false)
	}
	d.wakePollLocked() // a held poll loop may poll now, or pause the others in franz-go for it
	d.c.obs.Paused(PausedEvent{Group: d.c.group, Topic: ps.topic, Partition: ps.partition, Paused: false})
}

func (d *dispatcher) wakePollLocked() {
	select {
	case d.pollWake <- struct{}{}:
	default:
	}
}

// holdMax bounds how long the poll loop holds off for a paused partition before it pauses it in
// franz-go and polls the others: a slow partition delays its neighbours' records by at most this.
const holdMax = 100 * time.Millisecond

// waitRoom returns when the poll loop may poll: no partition is paused by holding the poll loop
// off; or a lane is idle with nothing ready, or holdMax has passed, in which case those partitions
// are paused in franz-go first (each one's buffered records are dropped, and fetched again after
// its resume; see adaptFetchLocked). False if ctx ended.
func (d *dispatcher) waitRoom(ctx context.Context) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	var (
		timer   *time.Timer
		expired bool
	)
	for d.holding > 0 {
		if (d.idle > 0 && d.readyLen() == 0 || expired) && d.anyRunningLocked() || d.stopped {
			for _, ps := range d.parts {
				if ps.holdsPoll {
					ps.holdsPoll = false
					d.c.setPaused(ps.tp, true)
				}
			}
			d.holding = 0
			d.adaptFetchLocked()
			return true
		}
		if timer == nil {
			timer = time.NewTimer(holdMax)
			defer timer.Stop()
		}
		d.mu.Unlock()
		select {
		case <-d.pollWake:
		case <-timer.C:
			expired = true
		case <-ctx.Done():
		}
		d.mu.Lock()
		if ctx.Err() != nil {
			return false
		}
	}
	return true
}

// recordOverhead is what a record adds to its key, value and headers in a record batch, in bytes
// (its length, attributes, deltas and varints, plus its share of the batch header).
const recordOverhead = 24

// adaptFetchLocked lowers the client's FetchMaxPartitionBytes so that one fetch brings about
// MaxInFlightPerPartition/2 records of a partition (at the mean size of the records polled so
// far; 16 KiB at least), and never raises it. A partition paused in franz-go drops what franz-go
// buffered for it, to fetch it again after the resume: a fetch bigger than the partition may hold
// is paid twice or more (docs/consumer-internals.md, back-pressure). FetchMaxBytes is kept.
func (d *dispatcher) adaptFetchLocked() {
	if d.recs == 0 {
		return
	}
	cl := d.c.cl
	if cl != d.fetchCl { // a new client (the Transactional mode rebuilds its session)
		d.fetchCl = cl
		d.fetchMax, _ = cl.OptValue(kgo.FetchMaxBytes).(int32)
		d.partMax, _ = cl.OptValue(kgo.FetchMaxPartitionBytes).(int32)
	}
	mean := d.recBytes/d.recs + recordOverhead
	want := int32(min(max(int64(d.perPart/2)*mean, 16<<10), math.MaxInt32))
	if want >= d.partMax || d.fetchMax <= 0 {
		return
	}
	d.c.log.Debug("tidemark: fetch size lowered to what a partition may hold", "fetch_max_partition_bytes", want,
		"was", d.partMax, "mean_record_bytes", mean)
	d.partMax = want
	cl.UpdateFetchMaxBytes(d.fetchMax, want)
}

func (d *dispatcher) flowAllLocked() {
	if d.maxAll <= 0 {
		return
	}
	switch {
	case !d.allPaused && d.held >= d.maxAll:
		d.allPaused = true
	case d.allPaused && d.held <= d.maxAll/2:
		d.allPaused = false
	default:
		return
	}
	for _, ps := range d.parts {
		d.flowLocked(ps)
	}
}

// delayLocked pauses ps until until (a retry copy on it is not due before then) and resumes it
// afterwards, unless back-pressure still holds it (Transactional, DESIGN §3.4).
func (d *dispatcher) delayLocked(ps *partState, until time.Time) {
	if !until.After(ps.delayed) {
		return
	}
	ps.delayed = until
	d.flowLocked(ps)
	var t *time.Timer
	t = time.AfterFunc(time.Until(until), func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, ok := d.timers[t]; !ok {
			return // stopped
		}
		delete(d.timers, t)
		d.flowLocked(ps)
	})
	d.timers[t] = struct{}{}
}

// delay is delayLocked for the partition key names, if it is owned.
func (d *dispatcher) delay(key tp, until time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ps := d.parts[key]; ps != nil {
		d.delayLocked(ps, until)
	}
}

// dropQueued drops every queued record (an aborted window's records are all read again): they are
// no longer held and their window counts them done. Records in a handler keep running.
func (d *dispatcher) dropQueued() {
	d.mu.Lock()
	defer d.mu.Unlock()
	drop := func(u *unit) {
		for _, it := range u.q {
			it.ps.held--
			d.held--
			if it.win != nil {
				it.win.w.Done()
			}
		}
		u.q = nil
	}
	for _, ps := range d.parts {
		if ps.single != nil {
			drop(ps.single)
		}
		for _, u := range ps.keys {
			drop(u)
		}
	}
	for _, u := range d.ready[d.rhead:] {
		drop(u)
	}
	for _, ps := range d.parts {
		d.flowLocked(ps)
	}
	d.flowAllLocked()
	d.notifyLocked()
}

// setTaken moves an Auto manual partition's position for kadm to off, never back.
func (d *dispatcher) setTaken(ps *partState, off int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ps.taken = max(ps.taken, off)
}

// setWindow sets the window the next records are polled into.
func (d *dispatcher) setWindow(w *txnWindow) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.win = w
}
