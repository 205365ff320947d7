package runtime

import (
	"cmp"
	"context"
	goruntime "runtime"
	"slices"
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

	held        int              // records held: queued, running, parked, and settled in a lane's take not yet finished
	handling    int              // records in a handler right now
	paused      bool             // back-pressure: the partition gets no more records (DESIGN §3.6)
	holdsPoll   bool             // paused, and holding the poll loop off
	fetchPaused bool             // paused in franz-go (PauseFetchPartitions)
	backlog     []*kgo.Record    // polled beyond the bounds, in offset order: admitted as the partition drains
	slab        []item           // items not yet used, allocated for the records admitted together
	units       []unit           // Unordered: units not yet used, likewise
	delayed     time.Time        // Transactional: paused until then for a retry copy not yet due
	single      *unit            // ByPartition, and keyless records under ByKey
	keys        map[string]*unit // ByKey
	copies      map[int64]*unit  // units of this group's retry copies, by offset, while queued or running

	// Auto: the position after the highest record whose handler has returned with none before it
	// in its take still running, in franz-go's order (kgo.EpochOffset.Less: leader epoch, then
	// offset): the cell of the highest epoch done so far, {-1, 0} before any. Lanes raise it,
	// never lower it; the committer marks it. An offset goes out only with its own record's
	// epoch: after a log truncation, the rewound records (a higher epoch, lower offsets) start a
	// new cell. Not the record itself: its value would keep its whole fetch buffer alive.
	done atomic.Pointer[doneCell]

	rewound atomic.Pointer[rewindMark] // Auto, Tracked: the rewinds so far (see stale); nil before any

	// settling is, when an Observer is set, how many records held counts that a Handler's lane has
	// settled in a take it has not finished (up to laneTake-1 of a unit): lanes add each one as it
	// is settled, finishTake takes them off under dispatcher.mu as it releases them (inFlight).
	settling atomic.Int32

	// guarded by dispatcher.mu, used by the committer
	high        int64     // the highest offset admitted (Transactional: into the current window), -1 for none
	oldest      int64     // Tracked: the oldest in-flight offset last seen, for InFlightEvent.OldestAge
	oldestSince time.Time // when it was first seen

	marked kgo.EpochOffset // Auto: the position last marked (guarded by consumer.markMu), {-1, 0} before any
}

// inFlight returns the records ps holds for its events (DeliveredEvent, InFlightEvent): queued,
// running or parked, not those a lane has settled in a take it has not finished yet.
// dispatcher.mu held.
func (ps *partState) inFlight() int { return ps.held - int(ps.settling.Load()) }

// A rewindMark is a partition's rewinds so far: the records admitted before one of them at or
// above its offset are stale (see stale). Immutable: a rewind stores a new one (nextRewind).
type rewindMark struct {
	n   uint32  // the partition's rewinds so far
	ats []int64 // the offsets the latest of them fetched again from, oldest first, the latest last: at most keptRewinds
}

// keptRewinds is how many rewinds of a partition a rewindMark keeps the offsets of. A record
// admitted before more rewinds than that is told stale by the latest keptRewinds only: one made
// stale by an older rewind alone runs (uncounted), as every record did before rewinds were followed.
const keptRewinds = 64

// nextRewind returns a partition's mark after one more rewind, from offset at; old is the mark
// before it, nil before any.
func nextRewind(old *rewindMark, at int64) *rewindMark {
	if old == nil {
		return &rewindMark{n: 1, ats: []int64{at}}
	}
	keep := old.ats[max(len(old.ats)-(keptRewinds-1), 0):]
	return &rewindMark{n: old.n + 1, ats: append(slices.Clip(keep), at)}
}

// A doneCell is Auto's done position within one leader epoch.
type doneCell struct {
	epoch int32        // immutable
	next  atomic.Int64 // the offset after the highest done record of the epoch
}

// markDone raises ps's done position to the one after the record at pos (its leader epoch and
// offset; Auto), never lowers it, and reports whether it moved: a compare-and-swap on the offset of
// its epoch's cell, or, for a record of a higher epoch, on the cell (a new one, allocated once per
// epoch). A record admitted after rewinds rewinds of ps (item.rewinds) that a later rewind made
// stale (partState.stale) moves nothing: it checks after loading the cell, and a rewind renews the
// cell after storing its mark (renewDone), so a record that passed the check before the rewind
// raises a cell the committer reads only if the raise lands before renewDone has read the cell
// (its copy, or a cell of a higher epoch that renewDone copies): while the rewind is being admitted,
// as if the record had been marked just before it, which nothing can tell apart. A raise after
// that lands in a cell the committer no longer reads (moved).
func (ps *partState) markDone(pos kgo.EpochOffset, rewinds uint32) bool {
	epoch := max(pos.Epoch, -1) // -1: unknown, as kgo.EpochOffset.Less takes it
	for {
		c := ps.done.Load()
		if ps.stale(pos.Offset, rewinds) {
			return false
		}
		switch {
		case epoch < c.epoch:
			return false
		case epoch == c.epoch:
			for {
				cur := c.next.Load()
				if cur > pos.Offset {
					return false
				}
				if c.next.CompareAndSwap(cur, pos.Offset+1) {
					return true // in a cell replaced meanwhile, it is below the new one: harmless
				}
			}
		}
		n := &doneCell{epoch: epoch}
		n.next.Store(pos.Offset + 1)
		if ps.done.CompareAndSwap(c, n) {
			return true
		}
	}
}

// renewDone replaces ps's done cell with a copy (Auto, at a rewind, after its mark is stored): a
// stale record that loaded the old cell before the mark can still raise it, but no longer where the
// committer reads (moved), unless it raised it before the copy (see markDone). A raise of the old
// cell by a record that is not stale, between the copy and the swap, is lost: the position then
// moves with the next done record, as after any commit that lags (the record is delivered again
// after a crash, never skipped).
func (ps *partState) renewDone() {
	for {
		c := ps.done.Load()
		n := &doneCell{epoch: c.epoch}
		n.next.Store(c.next.Load())
		if ps.done.CompareAndSwap(c, n) {
			return
		}
	}
}

// moved returns ps's position if it moved since the last call: the tracker's watermark (Tracked)
// or the done position with its leader epoch (Auto), read from a cell that was still current after
// its offset was read (see renewDone). consumer.markMu held.
func (ps *partState) moved() (kgo.EpochOffset, bool) {
	if ps.trk != nil {
		w, ok := ps.trk.Moved()
		return kgo.EpochOffset{Epoch: w.Epoch, Offset: w.Offset}, ok
	}
	var done kgo.EpochOffset
	for {
		c := ps.done.Load()
		done = kgo.EpochOffset{Epoch: c.epoch, Offset: c.next.Load()}
		if ps.done.Load() == c {
			break
		}
	}
	if !ps.marked.Less(done) {
		return kgo.EpochOffset{}, false
	}
	ps.marked = done
	return done, true
}

// stale reports whether a record at offset off, admitted after rewinds of ps's rewinds, is at or
// above the offset of a rewind of ps since (Auto, Tracked): fetched again, it is handled as its new
// copy, and the tracker no longer counts it (tracker.Partition.Deliver: a rewind stops counting the
// deliveries at or above its offset). Only the latest keptRewinds rewinds are known (rewindMark).
func (ps *partState) stale(off int64, rewinds uint32) bool {
	m := ps.rewound.Load()
	if m == nil || rewinds == m.n {
		return false
	}
	since := min(int(m.n-rewinds), len(m.ats))
	for _, at := range m.ats[len(m.ats)-since:] {
		if off >= at {
			return true
		}
	}
	return false
}

// A unit is what must be handled in order, one take at a time: a partition, a key, or (Unordered,
// and retry copies) a single record.
type unit struct {
	ps      *partState
	key     string
	keyed   bool
	copied  bool // a unit of ps.copies
	q       []*item
	buf     []*item       // q's array from its start: q goes back to it once emptied (no garbage per record)
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
// keep them small: 104 bytes.
type item struct {
	rec     *kgo.Record // the handler's to read (and, against the docs, to change): the runtime reads off and epoch
	off     int64       // rec's offset when admitted: what the runtime marks, counts and reports
	ps      *partState
	u       *unit
	timer   *time.Timer
	win     *txnWindow // Transactional: the window (transaction) the record was polled in
	slot    tracker.Delivery
	wait    time.Duration // actPark: the backoff (set by the lane that handled it)
	inPlace int32         // in-place retries so far
	epoch   int32         // rec's leader epoch when admitted
	copies  int32         // rec's retry count when admitted (retry.Count): the deliveries before its copy
	act     action        // how finishTake finishes it (set by the lane that handled it)
	control bool          // a transaction marker: settled without the handler
	foreign bool          // a retry copy made by another group: settled without the handler
	alone   bool          // handled out of order, in a unit of its own: a retry copy of this group
	rewinds uint32        // Auto, Tracked: ps's rewinds when admitted (see stale)
	// Auto, a batch's element not done (an in-place retry): the offset after the highest done
	// element of its partition that waited behind it, 0 for none, and that element's leader epoch:
	// marked once it is done (consumer.markBatch).
	after      int64
	afterEpoch int32
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

	mu         sync.Mutex
	cond       sync.Cond
	parts      map[tp]*partState
	ready      []*unit
	rhead      int
	held       int
	handling   int // records in a handler, all partitions (detached ones included)
	allPaused  bool
	allTimer   *time.Timer // while allPaused: lifts it after holdMax if there is room (allPauseExpired)
	stopping   atomic.Bool // set by stop, read by lanes between the records of a take
	waiting    atomic.Bool // a unit is listed in ready (maybe a stale entry): read by lanes (takeSlice)
	holding    int         // partitions holding the poll loop off (holdsPoll): it does not poll
	backlogs   bool        // records beyond a partition's bounds wait in its backlog (not Transactional)
	backlogged int         // partitions with a backlog
	fatal      error       // the tracker overflowed while admitting from a backlog (ErrTrackerFull)
	idle       int         // lanes waiting for a ready unit
	pollWake   chan struct{}
	stopped    bool
	parked     map[*item]struct{}
	waiters    int
	changed    chan struct{}
	win        *txnWindow               // Transactional: the window records are polled into
	free       []*item                  // items of settled records, for the next admitted ones (newItemLocked)
	timers     map[*time.Timer]struct{} // Transactional: partition delays
}

func newDispatcher(c *consumer) *dispatcher {
	d := &dispatcher{
		c:        c,
		backlogs: !c.txnMode,
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

// push queues one poll's records, at most n under one hold of the lock. It never blocks on a lane.
// It returns ErrTrackerFull's cause if a partition's tracker ring overflowed (a bug in pausing),
// which is fatal.
//
// With backlogs (Auto and Tracked), a partition takes records only while it has room under its
// bounds; the rest wait in its backlog, in offset order, and are admitted as it drains (see
// admitLocked). Without (Transactional: everything polled belongs to the window), every record is
// queued and a partition's bound is exceeded by at most one poll.
func (d *dispatcher) push(fs kgo.Fetches, n int) ([]DeliveredEvent, bool, error) {
	var (
		events []DeliveredEvent
		moved  bool
		err    error
	)
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 || err != nil {
			return
		}
		var records int // counted before lanes have the records (a handler may publish one: franz-go writes it)
		for _, r := range p.Records {
			if !r.Attrs.IsControl() {
				records++
			}
		}
		var ev DeliveredEvent
		for recs := p.Records; len(recs) > 0 && err == nil; {
			var chunk []*kgo.Record
			chunk, recs = batch.Cut(recs, n)
			var m bool
			m, ev, err = d.pushPart(p.Topic, p.Partition, chunk)
			moved = moved || m
		}
		ev.Records = records
		events = append(events, ev)
	})
	return events, moved, err
}

// pushPart queues recs, records of one partition, under one hold of the lock.
func (d *dispatcher) pushPart(topic string, partition int32, recs []*kgo.Record) (bool, DeliveredEvent, error) {
	d.mu.Lock()
	ready := d.readyLen()
	key := tp{topic, partition}
	ps := d.parts[key]
	if ps == nil {
		ps = d.c.newPart(key)
		d.parts[key] = ps
	}
	moved, err := d.admitLocked(ps, recs)
	ev := DeliveredEvent{Group: d.c.group, Topic: topic, Partition: partition, InFlight: ps.inFlight()}
	d.flowLocked(ps)
	d.flowAllLocked()
	wake := min(d.readyLen()-ready, d.idle)
	d.mu.Unlock()
	for range wake { // one idle lane per unit that became ready, woken outside the lock
		d.cond.Signal()
	}
	return moved, ev, err
}

// slabLen is how many items (or units) to allocate at once for ps when left records wait: what
// its bound has room for, at least 64, at most left.
func (d *dispatcher) slabLen(ps *partState, left int) int {
	if !d.backlogs {
		return left
	}
	return min(left, max(d.perPart-ps.held, 64))
}

// roomLocked reports whether ps may take one more record: it holds fewer than
// MaxInFlightPerPartition records, its tracker's span is below the bound too, and the
// subscription is below MaxInFlight (DESIGN §3.6). Always true without backlogs.
func (d *dispatcher) roomLocked(ps *partState) bool {
	if !d.backlogs {
		return true
	}
	return ps.held < d.perPart && (ps.trk == nil || ps.trk.Span() < d.perPart) &&
		(d.maxAll <= 0 || d.held < d.maxAll && !d.allPaused)
}

// admitLocked hands ps's backlog, then recs, to its units while ps has room (roomLocked); the
// records that do not fit are appended to the backlog. Each admitted record is delivered to the
// tracker (Tracked), joins the Transactional window, and is queued, parked (a retry copy not yet
// due) or settled at once (a transaction marker). It reports whether a marker moved the
// watermark, and ErrTrackerFull's cause if the ring overflowed.
func (d *dispatcher) admitLocked(ps *partState, recs []*kgo.Record) (moved bool, err error) {
	had := len(ps.backlog) > 0
	defer func() {
		switch has := len(ps.backlog) > 0; {
		case has && !had:
			d.backlogged++
		case had && !has:
			d.backlogged--
		}
	}()
	if n := len(ps.backlog); n > 0 && len(recs) > 0 && recs[0].Offset <= ps.backlog[n-1].Offset {
		// Fetched again from a lower offset: what the backlog holds at or above it comes again
		// (see dropFromLocked). Never admitted, it has nothing to undo.
		i, _ := slices.BinarySearchFunc(ps.backlog, recs[0].Offset, func(r *kgo.Record, off int64) int {
			return cmp.Compare(r.Offset, off)
		})
		clear(ps.backlog[i:])
		ps.backlog = ps.backlog[:i]
	}
	if len(ps.backlog) > 0 {
		n, m, err := d.admitSomeLocked(ps, ps.backlog)
		clear(ps.backlog[:n])
		ps.backlog = ps.backlog[n:]
		if moved = m; err != nil || len(ps.backlog) > 0 {
			ps.backlog = append(ps.backlog, recs...)
			return moved, err
		}
		ps.backlog = nil // let go of the array
	}
	n, m, err := d.admitSomeLocked(ps, recs)
	if n < len(recs) && err == nil {
		ps.backlog = append(ps.backlog, recs[n:]...) // a new array: recs is franz-go's
	}
	return moved || m, err
}

// admitSomeLocked admits recs in order while ps has room and returns how many it used up (admitted,
// settled or, in an aborted Transactional window, let go).
func (d *dispatcher) admitSomeLocked(ps *partState, recs []*kgo.Record) (used int, moved bool, err error) {
	now := time.Time{}
	mark := ps.rewound.Load() // stored under d.mu, here only: read once
	for i, r := range recs {
		if !d.roomLocked(ps) {
			return i, moved, nil
		}
		it := d.newItemLocked(ps, len(recs)-i)
		it.rec, it.off, it.epoch, it.ps, it.control = r, r.Offset, r.LeaderEpoch, ps, r.Attrs.IsControl()
		var due time.Duration
		if !it.control && len(r.Headers) > 0 { // read here, where r is in the cache, not by the lane
			it.copies = int32(retry.Count(r))
			if g := retry.GroupOf(r); g != "" {
				// A copy of this group is out of order by nature (DESIGN §3.3); another group's
				// is settled in its place: out of order, Auto would mark past the records before it.
				it.foreign = g != d.c.group
				it.alone = !it.foreign
				if nb, ok := retry.NotBefore(r); ok && !it.foreign {
					if now.IsZero() {
						now = time.Now()
					}
					due = nb.Sub(now)
				}
			}
		}
		if d.backlogs { // Auto, Tracked; Transactional aborts its window instead (below)
			if r.Offset <= ps.high {
				// Fetched again from a lower offset (a log truncation, an offset reset): the
				// records admitted from the first fetch at or above it come again, or are gone
				// from the log. They are not handled beside their new copies: the queued ones are
				// dropped, the taken ones are no longer runnable (stale); the tracker's rewind
				// (Deliver) stops counting them.
				mark = nextRewind(mark, r.Offset)
				ps.rewound.Store(mark)
				if ps.trk == nil {
					ps.renewDone() // after the mark: see markDone
				}
				d.dropFromLocked(ps, r.Offset)
			}
			ps.high = r.Offset
			if mark != nil {
				it.rewinds = mark.n
			}
		}
		if ps.trk != nil {
			slot, derr := ps.trk.Deliver(r.Offset, r.LeaderEpoch)
			if derr != nil {
				d.freeLocked(it)
				return i, moved, derr
			}
			it.slot = slot
			if it.control { // DESIGN §3.7a: markers are settled by the runtime itself
				moved = ps.trk.Complete(slot) == tracker.Completed || moved
				d.freeLocked(it)
				continue
			}
		}
		if d.win != nil {
			if d.win.w.Aborted() != nil {
				d.freeLocked(it)
				return len(recs), moved, nil // the whole window is read again
			}
			if r.Offset <= ps.high {
				// Fetched again from a lower offset (a log truncation rewound franz-go): the records
				// queued from the first fetch would be handled beside their new copies, and both
				// publish in one transaction. The window is read again from the committed offsets.
				d.freeLocked(it)
				d.win.w.Abort(errRewound)
				return len(recs), moved, nil
			}
			ps.high = r.Offset
			if due > 0 { // DESIGN §3.4: abort once, pause the partition until the copy is due
				d.freeLocked(it)
				d.win.w.Abort(errCopyNotDue)
				d.delayLocked(ps, time.Now().Add(due))
				return len(recs), moved, nil
			}
			it.win = d.win
			d.win.w.Add(1)
		}
		if due > 0 {
			d.parkLocked(it, due)
			continue
		}
		var own *unit
		if d.ordering == Unordered {
			if len(ps.units) == 0 {
				ps.units = make([]unit, d.slabLen(ps, len(recs)-i))
			}
			own = &ps.units[0]
			ps.units = ps.units[1:]
		}
		d.enqueueLocked(it, own)
	}
	return len(recs), moved, nil
}

// newItemLocked returns a zero item for one of the left records being admitted to ps: a settled
// record's (d.free), or one of a slab allocated for them (about one allocation per poll while the
// free items run short).
func (d *dispatcher) newItemLocked(ps *partState, left int) *item {
	if n := len(d.free); n > 0 {
		it := d.free[n-1]
		d.free[n-1] = nil
		d.free = d.free[:n-1]
		return it
	}
	if len(ps.slab) == 0 {
		ps.slab = make([]item, d.slabLen(ps, left))
	}
	it := &ps.slab[0]
	ps.slab = ps.slab[1:]
	return it
}

// enqueueLocked queues it in its unit. Under Unordered that is own, a unit of its own (the caller
// allocates them per poll).
func (d *dispatcher) enqueueLocked(it *item, own *unit) {
	ps := it.ps
	var u *unit
	switch {
	case it.alone:
		// A copy of this group: one unit per offset, so that a copy read again (a Transactional
		// window aborted) waits for its old delivery's handler to return, as a ByPartition record
		// waits behind the one its lane is running.
		u = ps.copies[it.off]
		if u == nil {
			if ps.copies == nil {
				ps.copies = make(map[int64]*unit)
			}
			u = &unit{ps: ps, copied: true}
			ps.copies[it.off] = u
		}
	case d.ordering == Unordered:
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
	n := cap(u.q)
	if len(u.q) == n && u.buf != nil && 3*len(u.q) <= 2*cap(u.buf) {
		// Takes have sliced q from its front up to its array's end, and a third of the array or
		// more lies unused before it: move q back to the start instead of growing it (a queue fed
		// at its end and taken from its front would otherwise allocate forever without emptying).
		// Each move of len(q) records leaves room for len(q)/2 appends: O(1) per record.
		k := copy(u.buf[:len(u.q)], u.q)
		clear(u.buf[k:cap(u.buf)])
		u.q = u.buf[:k]
	}
	if u.q = append(u.q, it); cap(u.q) != n {
		u.buf = u.q[:0] // a new array, starting at u.q
	}
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
	if n := d.readyLen(); len(d.ready) == cap(d.ready) && d.rhead > 0 && 3*n <= 2*cap(d.ready) {
		// Taken from its front (rhead) and fed at its end, the list starts over at its array's
		// start only once empty, which it never is while lanes lag behind: move what is ready to the
		// start instead of growing the array by one entry per take for good (helper-91). As for a
		// unit's q (enqueueLocked): O(1) per entry.
		k := copy(d.ready, d.ready[d.rhead:])
		clear(d.ready[k:])
		d.ready, d.rhead = d.ready[:k], 0
	}
	d.ready = append(d.ready, u)
	if !d.waiting.Load() { // a store only when it changes: this runs for each record under Unordered
		d.waiting.Store(true)
	}
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
		if u.q = rest; len(rest) == 0 && u.buf != nil {
			u.q = u.buf // emptied: appends start over at the array's start
		}
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
		d.waiting.Store(false)
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
// items' array), so a lane with work waiting never parks; none for next 0 (a lane that ends).
func (d *dispatcher) finishTake(items []*item, handled, next int) ([]*item, bool) {
	if d.ordering == Unordered { // a lock per record, for thousands of lanes maybe
		d.lockYielding()
	} else {
		d.mu.Lock()
	}
	defer d.mu.Unlock()
	ready := d.readyLen()
	// Records not handled go back to the head of their unit, in order: under ByPartition and ByKey
	// a take is one unit; under Unordered each record has its own (a Handler's take of one record
	// is the only one that stops early there, but nothing here relies on it).
	var back []*item
	for _, it := range items[handled:] {
		d.releaseLocked(it)
		if d.runnable(it) {
			back = append(back, it)
		} else {
			d.dropItemLocked(it)
		}
	}
	for end := len(back); end > 0; { // a unit's run of them before its queue, the last run first
		start := end - 1
		u := back[start].u
		for start > 0 && back[start-1].u == u {
			start--
		}
		u.q = append(back[start:end:end], u.q...)
		end = start
	}
	var last *partState
	counted := d.c.observed && d.c.bh == nil // handleTake counted its settled records (settling)
	for _, it := range items[:handled] {
		ps := it.ps // finishLocked may recycle it
		if counted && it.act == actDone {
			ps.settling.Add(-1)
		}
		d.releaseLocked(it)
		d.finishLocked(it)
		if ps != last && last != nil {
			d.flowLocked(last)
		}
		last = ps
	}
	for _, it := range items[handled:] {
		switch u := it.u; {
		case u.busy():
		case len(u.q) > 0:
			d.readyLocked(u)
		default: // its records dropped: forgotten as after its last record
			d.forgetUnitLocked(u, it)
		}
	}
	if last != nil {
		d.flowLocked(last)
	}
	d.flowAllLocked()
	d.notifyLocked()
	var grabbed []*item
	if !d.stopped && next > 0 {
		grabbed = d.grabLocked(items, next)
	}
	d.wakeLanesLocked(ready) // for what this lane did not take
	if len(grabbed) > 0 || next == 0 {
		return grabbed, len(grabbed) > 0
	}
	return d.takeLocked(items[:0], next)
}

func (d *dispatcher) readyLen() int { return len(d.ready) - d.rhead }

// lockSpins is how many times lockYielding tries the lock, yielding between tries, before it waits
// in the lock's queue.
const lockSpins = 64

// lockYielding takes d.mu for an Unordered lane finishing its take. With thousands of lanes
// finishing one record each, lanes queued on the lock turn it into a hand-off in turn (a
// sync.Mutex whose waiter waited 1 ms passes the lock to that waiter, which must be scheduled
// before anyone can use it): the lock then runs at the scheduler's wake-up rate, not at its hold
// time. A lane that yields and tries again stays runnable and takes the lock as soon as it is free;
// after lockSpins tries it queues. Measured on 2 cores, 4,096 lanes: 0.76 → 0.86 of the ideal
// (docs/performance.md). Ordered lanes take up to 64 records per lock and keep Lock: for the
// one-lane end-to-end benchmark, yielding measured no better.
func (d *dispatcher) lockYielding() {
	for range lockSpins {
		if d.mu.TryLock() {
			return
		}
		goruntime.Gosched()
	}
	d.mu.Lock()
}

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
// dispatcher is not stopping, its Transactional window has not aborted, and it is not stale.
func (d *dispatcher) runnable(it *item) bool {
	return !it.ps.closed.Load() && !d.stopping.Load() && (it.win == nil || it.win.w.Aborted() == nil) &&
		!it.stale()
}

// stale reports whether a rewind made it stale (partState.stale).
func (it *item) stale() bool { return it.ps.stale(it.off, it.rewinds) }

// finishLocked applies a handled record's act.
func (d *dispatcher) finishLocked(it *item) {
	ps, u, act := it.ps, it.u, it.act
	recycle := false
	if it.win != nil {
		it.win.w.Done()
		if act == actPark {
			act = actDone // nothing is parked across windows: the window aborts instead
		}
	}
	switch {
	case act == actHold:
		u.blocked = true
	case act == actPark && !ps.closed.Load() && !d.stopped && !it.stale():
		u.retry = append(u.retry, it)
		u.wait = max(u.wait, it.wait)
	default: // done, or a park that can no longer happen (a stale record's too): it stays uncommitted
		ps.held--
		d.held--
		// Recycled below for the next admitted record, unless a timer may still name it (a
		// retry's park: a stopped timer's callback can be under way).
		recycle = it.timer == nil
	}
	if ps.closed.Load() {
		return // its partition is gone: not recycled either
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
	if !u.busy() && len(u.q) == 0 {
		d.forgetUnitLocked(u, it)
	}
	if recycle {
		d.freeLocked(it)
	}
}

// freeLocked zeroes an item no longer needed and keeps it for the next admitted record
// (newItemLocked). Nothing may name it any more: not a unit, a timer, a lane or d.parked.
func (d *dispatcher) freeLocked(it *item) {
	*it = item{}
	d.free = append(d.free, it)
}

// forgetUnitLocked unlists a ByKey or copy unit that holds nothing any more; it was its last
// record.
func (d *dispatcher) forgetUnitLocked(u *unit, it *item) {
	switch {
	case u.keyed && u.ps.keys[u.key] == u:
		delete(u.ps.keys, u.key)
	case u.copied && u.ps.copies[it.off] == u:
		delete(u.ps.copies, it.off)
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
	var pss []*partState
	for topic, parts := range tps {
		for _, p := range parts {
			if ps := d.parts[tp{topic, p}]; ps != nil {
				pss = append(pss, ps)
			}
		}
	}
	return d.detachLocked(pss)
}

// detachStates detaches, as detach does, those of pss that are still held: a partition assigned
// again since has a new state, which stays. It returns the detached states.
func (d *dispatcher) detachStates(pss []*partState) []*partState {
	d.mu.Lock()
	defer d.mu.Unlock()
	pss = slices.DeleteFunc(slices.Clone(pss), func(ps *partState) bool { return d.parts[ps.tp] != ps })
	return d.detachLocked(pss)
}

func (d *dispatcher) detachLocked(pss []*partState) []*partState {
	defer d.wakeLanesLocked(d.readyLen()) // what the others admit with the room the revoke freed
	for _, ps := range pss {
		d.dropLocked(ps)
	}
	d.flowAllLocked()
	return pss
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
	ps.keys, ps.copies = nil, nil
	if len(ps.backlog) > 0 {
		d.backlogged--
	}
	ps.backlog, ps.slab, ps.units = nil, nil, nil
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
	if d.allTimer != nil {
		d.allTimer.Stop()
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

// flowLocked admits what ps's backlog has room for, pauses ps at its bound (held records, or the
// tracker's span; or while the whole subscription is over MaxInFlight, or a Transactional delay)
// and resumes it once it has drained to half with an empty backlog (DESIGN §3.6).
//
// A paused partition holds the poll loop off while its backlog is a full bound (without backlogs,
// while it is paused): franz-go keeps its next buffered fetch, and nothing is fetched twice. The
// poll loop pauses it in franz-go only when a lane has nothing to do (waitRoom), since that
// makes franz-go drop the partition's buffered records, to fetch them again after the resume
// (docs/consumer-internals.md, back-pressure). A Transactional delay (a retry copy not yet due)
// pauses in franz-go at once: the copy must not be polled again before then.
func (d *dispatcher) flowLocked(ps *partState) {
	if ps.closed.Load() {
		return
	}
	if len(ps.backlog) > 0 && !d.stopped && d.roomLocked(ps) { // nothing is admitted once stopped
		moved, err := d.admitLocked(ps, nil)
		if err != nil && d.fatal == nil {
			d.fatal = err
			d.wakePollLocked() // the poll loop fails the App
		}
		if moved {
			d.c.kick()
		}
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
	case !ps.paused && (ps.held >= d.perPart || span >= d.perPart || d.allPaused || delayed || len(ps.backlog) > 0):
		ps.paused = true
		if delayed { // a copy not due must not be polled at all
			ps.fetchPaused = true
			d.c.setPaused(ps.tp, true)
		}
		d.c.obs.Paused(PausedEvent{Group: d.c.group, Topic: ps.topic, Partition: ps.partition, Paused: true})
	case ps.paused && ps.held <= d.perPart/2 && span <= d.perPart/2 && !d.allPaused && !delayed && len(ps.backlog) == 0:
		d.resumeLocked(ps)
	}
	d.holdLocked(ps)
}

// holdLocked sets whether ps holds the poll loop off: paused, not in franz-go, and with a backlog
// of MaxInFlightPerPartition records or more: enough to refill its bound once more, so another
// fetch can wait (without backlogs: paused).
func (d *dispatcher) holdLocked(ps *partState) {
	hold := ps.paused && !ps.fetchPaused && (len(ps.backlog) >= d.perPart || !d.backlogs)
	if hold == ps.holdsPoll {
		return
	}
	ps.holdsPoll = hold
	if hold {
		d.holding++
	} else {
		d.holding--
	}
	d.wakePollLocked() // the poll loop may poll now, or pause the others in franz-go for a lane
}

// resumeLocked ends a pause: in franz-go, or by letting the poll loop poll again.
func (d *dispatcher) resumeLocked(ps *partState) {
	ps.paused = false
	if ps.fetchPaused {
		ps.fetchPaused = false
		d.c.setPaused(ps.tp, false)
	}
	d.holdLocked(ps)
	d.wakePollLocked() // a held poll loop may poll now, or pause the others in franz-go for it
	d.c.obs.Paused(PausedEvent{Group: d.c.group, Topic: ps.topic, Partition: ps.partition, Paused: false})
}

func (d *dispatcher) wakePollLocked() {
	select {
	case d.pollWake <- struct{}{}:
	default:
	}
}

// holdMax bounds how long a partition that is not paused waits for the poll loop while others hold
// it off: then the holders are paused in franz-go and the poll loop polls, so a slow partition
// delays its neighbours' records by at most this.
const holdMax = 100 * time.Millisecond

// waitRoom returns when the poll loop may poll: no partition holds it off (holdLocked); or a
// partition that is not paused waits for records while a lane is idle with nothing ready, or for
// holdMax. In those cases the holding partitions are paused in franz-go first (each one's
// buffered records are dropped, and fetched again after its resume). While every lane has work
// and no partition waits, a poll could only feed backlogs: the poll loop waits. False if ctx
// ended.
func (d *dispatcher) waitRoom(ctx context.Context) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	var (
		timer   *time.Timer
		expired <-chan time.Time
		waited  bool
	)
	for d.holding > 0 && d.fatal == nil {
		running := d.anyRunningLocked()
		if running && timer == nil { // a partition waits for records from now on
			timer = time.NewTimer(holdMax)
			defer timer.Stop()
			expired = timer.C
		}
		if running && (d.idle > 0 && d.readyLen() == 0 || waited) || d.stopped {
			for _, ps := range d.parts {
				if ps.holdsPoll {
					ps.holdsPoll, ps.fetchPaused = false, true
					d.c.setPaused(ps.tp, true)
				}
			}
			d.holding = 0
			return true
		}
		d.mu.Unlock()
		select {
		case <-d.pollWake:
		case <-expired:
			waited, expired = true, nil
		case <-ctx.Done():
		}
		d.mu.Lock()
		if ctx.Err() != nil {
			return false
		}
	}
	return true
}

// fatalErr returns the error that ended admitting from a backlog (the tracker overflowed), if any.
func (d *dispatcher) fatalErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fatal
}

// flowAllLocked applies MaxInFlight: the subscription's partitions pause once it holds maxAll
// records and resume once it has drained to half, or, with room left under maxAll, holdMax after
// the pause began (allPauseExpired). Records held elsewhere (a blocked head, a long retry backoff)
// may keep the subscription above half for good; they must not stop the other partitions while
// there is room (DESIGN §3.6). Lifting the pause sooner, at each record of room, made every
// partition pause and resume per record at the bound.
func (d *dispatcher) flowAllLocked() {
	if d.maxAll <= 0 {
		return
	}
	switch {
	case !d.allPaused && d.held >= d.maxAll:
		d.allPaused = true
		if d.allTimer == nil {
			d.allTimer = time.AfterFunc(holdMax, d.allPauseExpired)
		} else {
			d.allTimer.Reset(holdMax)
		}
	case d.allPaused && d.held <= d.maxAll/2:
		d.allPaused = false
	case !d.allPaused && d.backlogged > 0:
		// Room in the subscription, freed by any partition: offer it to the backlogs, which are
		// otherwise admitted only when their own partition changes (in the map's random order,
		// so no partition is always last).
		for _, ps := range d.parts {
			if len(ps.backlog) > 0 {
				d.flowLocked(ps)
			}
		}
		return
	default:
		return
	}
	for _, ps := range d.parts {
		d.flowLocked(ps)
	}
}

// allPauseExpired lifts a subscription-wide pause that has lasted holdMax while the subscription
// holds fewer than maxAll records (whatever holds it above half is not draining), or looks again
// holdMax later. So partitions that hold little, and may have nothing polled yet (the poll loop
// waits while every partition is paused), get the room that is left: the backlogs are admitted,
// idle lanes woken, the poll loop let go (resumeLocked), and the pause set again at the bound.
func (d *dispatcher) allPauseExpired() {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.stopped || !d.allPaused:
	case d.held < d.maxAll:
		ready := d.readyLen()
		d.allPaused = false
		for _, ps := range d.parts {
			d.flowLocked(ps)
		}
		d.flowAllLocked()
		d.wakeLanesLocked(ready)
	default:
		d.allTimer.Reset(holdMax)
	}
}

// delayLocked pauses ps until until (a retry copy on it is not due before then) and resumes it
// afterwards, unless back-pressure still holds it (Transactional, DESIGN §3.4). Once dispatching
// stopped it does nothing: a copy whose produce returned after that must not arm a timer that stop
// no longer sees, which would pause and resume a partition, and report it, after the App stopped
// (helper-72). (A revoked or lost partition is no longer in d.parts, where callers find ps.)
func (d *dispatcher) delayLocked(ps *partState, until time.Time) {
	if d.stopped || !until.After(ps.delayed) {
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

// dropQueued drops the queued records of tw, an aborted window (they are all read again): they are
// no longer held and tw counts them done. Records in a handler keep running, and records of another
// window stay queued: a handler of an earlier window that returns late, and aborts it again, must
// not settle the records of the window polled since.
func (d *dispatcher) dropQueued(tw *txnWindow) {
	d.mu.Lock()
	defer d.mu.Unlock()
	drop := func(u *unit) {
		if u.ps.closed.Load() {
			return // a revoked or lost partition's queued records left d.held with it (dropLocked)
		}
		kept := u.q[:0]
		for _, it := range u.q {
			if it.win != tw {
				kept = append(kept, it)
				continue
			}
			it.ps.held--
			d.held--
			tw.w.Done()
		}
		clear(u.q[len(kept):])
		u.q = kept
	}
	for _, ps := range d.parts {
		dropUnitsLocked(ps, drop)
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

// dropFromLocked drops ps's queued and parked records at offset off and above (Auto, Tracked: a
// rewind fetches them again, or they are gone from the log): they are no longer held, and a unit
// parked behind a retry's backoff no longer waits for it. The records lanes have taken are stale
// (runnable); those behind a blocked head stay.
func (d *dispatcher) dropFromLocked(ps *partState, off int64) {
	drop := func(u *unit) {
		if u.blocked {
			return
		}
		kept := u.q[:0]
		for _, it := range u.q {
			if it.off < off {
				kept = append(kept, it)
				continue
			}
			ps.held--
			d.held--
		}
		clear(u.q[len(kept):])
		u.q = kept
	}
	for it := range d.parked {
		if it.ps == ps && it.off >= off {
			it.timer.Stop() // a callback under way finds it gone (unpark)
			delete(d.parked, it)
			it.u.parked = false
			drop(it.u) // a unit of its own (a copy not yet due, Unordered) is listed nowhere else
			// What it keeps, below off, is ready again: a record stale by a rewind older than
			// keptRewinds only, parked at the head of that rewind's new copies, leaves them
			// behind it, and this rewind's own record may join another unit.
			d.readyLocked(it.u)
		}
	}
	dropUnitsLocked(ps, drop)
	if d.ordering == Unordered { // a record's own unit is listed nowhere but in the ready list
		for _, u := range d.ready[d.rhead:] {
			if u.ps == ps {
				drop(u)
			}
		}
	}
}

// dropUnitsLocked runs drop, which takes records out of a unit's queue, on ps's partition, key and
// copy units, and forgets the key and copy units it emptied that are idle, as after their last
// record (a copy's unit is listed nowhere else). Units of their own (Unordered) are the caller's.
func dropUnitsLocked(ps *partState, drop func(*unit)) {
	if ps.single != nil {
		drop(ps.single)
	}
	for key, u := range ps.keys {
		drop(u)
		if !u.busy() && len(u.q) == 0 {
			delete(ps.keys, key)
		}
	}
	for off, u := range ps.copies {
		drop(u)
		if !u.busy() && len(u.q) == 0 {
			delete(ps.copies, off)
		}
	}
}

// setWindow sets the window the next records are polled into.
func (d *dispatcher) setWindow(w *txnWindow) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.win = w
	for _, ps := range d.parts {
		ps.high = -1
	}
}
