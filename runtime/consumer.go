package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/tracker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// registration is one Handle or HandleBatch call.
type registration struct {
	sub     Subscription
	handler Handler      // Handle
	batch   BatchHandler // HandleBatch
	batchN  int          // HandleBatch's n
	isBatch bool
	cfg     handleConfig
}

// consumer runs one subscription: one franz-go client, its poll loop, its lanes and its committer.
type consumer struct {
	app       *App
	idx       int
	sub       Subscription
	cfg       handleConfig
	h         Handler
	bh        BatchHandler
	batchN    int
	group     string
	tracked   bool
	txnMode   bool
	manual    bool
	log       *slog.Logger
	fetchErrs fetchErrLog // fetch error lines, one per partition every fetchErrEvery
	obs       Observer
	observed  bool // an Observer other than the no-op one is set: it gets handler durations and SettledEvents

	cl   *kgo.Client               // guarded by d.mu in the Transactional mode, where it is rebuilt
	sess *kgo.GroupTransactSession // Transactional mode only; owned by the poll loop
	adm  *kadm.Client              // manual partitions with a group: offsets are read and committed with kadm

	d      *dispatcher
	markMu sync.Mutex // orders marks against revokes: lock order markMu → d.mu
	gen    atomic.Uint64

	ready      chan struct{} // closed on the first assignment (group) or at start (manual)
	denied     chan error    // the group loop's first authorization error (fenceWatch): Start fails with it
	readyOnce  sync.Once
	workCtx    context.Context // parent of every partition's handler ctx
	cutWork    context.CancelCauseFunc
	stopPoll   context.CancelFunc
	barrier    context.Context // cancelled once Shutdown's ctx ends after polling stopped (waitBarrier)
	cutBarrier context.CancelCauseFunc
	lastAbort  error // Transactional: the last window's abort cause (the poll loop's; read after pollDone)
	lastEnd    error // Transactional: the last window's End error, likewise
	pollDone   chan struct{}
	stopComm   chan struct{}
	commDone   chan struct{}          // closed when the committer returns; nil if it never started
	probed     bool                   // probeOwn ran
	txnPart    kgo.Partitioner        // Transactional: the user's partitioner (probeOwn)
	userLog    kgo.Logger             // the user's kgo.Logger, nil if none (probeOwn)
	kgoLog     *recreationWatch       // the client's kgo.Logger; nil in Start's validation (consumerOptsErr)
	excluded   []string               // the client's kgo.ConsumeExcludeTopics
	recreated  atomic.Pointer[string] // a topic read was re-created: a Transactional session is made again (pollTxn); a manual one commits nothing more
	txnSlots   chan struct{}          // Transactional: the sessions' buffer slots, for QueueTimeout (acquireSlot)
	revokes    atomic.Uint64          // Transactional: revokes and losses that reached this member (checkOwnership)
	ownMark    uint64                 // Transactional, the poll loop's: revokes just before the previous End
	ownRetry   bool                   // Transactional, the poll loop's: the last check was inconclusive; ask again
	ownSince   time.Time              // Transactional, the poll loop's: when the current run of inconclusive checks began
	wake       chan struct{}
	wg         sync.WaitGroup // lanes and the committer
	closing    atomic.Bool    // set before the client leaves the group at shutdown
	// committedFinal: Shutdown's final commit succeeded, passed its bound, or was fenced: a revoke
	// after it (leaving the group, or franz-go ending a fenced session first) commits nothing.
	// finalStarted is set as that commit begins, finalDone closed once committedFinal is set.
	committedFinal atomic.Bool
	finalStarted   atomic.Bool
	finalDone      chan struct{}

	txnMu    sync.Mutex
	txnTried map[tp]map[int64]int   // Transactional: failed deliveries per offset, across aborted windows
	txnGone  map[tp]map[int64]error // Transactional: offsets whose attempts were spent in an aborted window, with the last failure

	manualMu      sync.Mutex
	manualPending map[tp]kgo.EpochOffset // manual partitions: moved positions not yet committed
	manualTopicID [16]byte               // manual partitions with a group: the topic's ID at start (zero: not known)
}

func newConsumer(a *App, idx int, r registration, base context.Context) (*consumer, error) {
	c := &consumer{
		app:       a,
		idx:       idx,
		sub:       r.sub,
		cfg:       r.cfg,
		h:         r.handler,
		bh:        r.batch,
		batchN:    r.batchN,
		group:     a.groupOf(r.sub),
		tracked:   r.sub.mode.kind == modeTracked,
		txnMode:   r.sub.mode.kind == modeTxn,
		manual:    r.sub.kind == subPartitions,
		obs:       a.cfg.observer,
		ready:     make(chan struct{}),
		denied:    make(chan error, 1),
		pollDone:  make(chan struct{}),
		stopComm:  make(chan struct{}),
		finalDone: make(chan struct{}),
		wake:      make(chan struct{}, 1),
	}
	_, nop := c.obs.(NopObserver)
	c.observed = !nop
	c.log = a.log.With("subscription", r.sub.String(), "group", c.group, "mode", r.sub.mode.String())
	c.d = newDispatcher(c)
	// The group join starts as soon as the client exists, so handler contexts must exist first.
	c.workCtx, c.cutWork = context.WithCancelCause(base)
	c.barrier, c.cutBarrier = context.WithCancelCause(context.Background())
	c.probeOwn(c.clientOpts()) // a Transactional session's clientOpts probed already
	c.kgoLog = &recreationWatch{user: c.userLog, onRecreated: c.topicRecreated}
	if c.txnMode {
		sess, err := kgo.NewGroupTransactSession(c.clientOpts()...)
		if err != nil {
			c.cutWork(err)
			return nil, fmt.Errorf("tidemark: %s: transactional session: %w", r.sub, err)
		}
		c.sess, c.cl = sess, sess.Client()
		c.txnSlots = bufferSlots(c.cl) // a rebuilt session has the same options
		c.excluded, _ = c.cl.OptValue(kgo.ConsumeExcludeTopics).([]string)
		return c, nil
	}
	cl, err := kgo.NewClient(c.clientOpts()...)
	if err != nil {
		c.cutWork(err)
		return nil, fmt.Errorf("tidemark: %s: client: %w", r.sub, err)
	}
	c.cl = cl
	c.excluded, _ = c.cl.OptValue(kgo.ConsumeExcludeTopics).([]string)
	if c.manual && c.group != "" {
		c.adm = kadm.NewClient(cl)
	}
	return c, nil
}

// clientOpts builds the client's options in the order of DESIGN §3.10: seeds and isolation, the
// user's options, then what the mode owns.
func (c *consumer) clientOpts() []kgo.Opt {
	a := c.app
	opts := []kgo.Opt{
		kgo.SeedBrokers(a.cfg.brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ProducerLinger(0), // Transactional handlers wait for each produce: no linger by default
	}
	opts = append(opts, a.cfg.clientOpts...)
	if c.txnMode { // the session produces too; the subscription's own options win (helper-119)
		opts = append(opts, a.cfg.producerOpts...)
	}
	opts = append(opts, c.sub.opts...)
	start := kgo.NewOffset().AtStart()
	if c.sub.start == Latest {
		start = kgo.NewOffset().AtEnd()
	}
	opts = append(opts,
		kgo.ConsumeStartOffset(start),
		kgo.ConsumeResetOffset(start),
		kgo.KeepControlRecords(),
	)
	if c.manual { // the partitions and their offsets are added by start
		// Neither a group nor topics nor partitions of the user's options: franz-go would read those
		// too, or, in a group, none of the partitions start adds (helpers 128, 130).
		opts = append(opts, kgo.ConsumerGroup(""), kgo.ConsumeTopics(), kgo.ConsumePartitions(nil))
		if c.kgoLog != nil { // not in Start's validation
			opts = append(opts, kgo.WithLogger(c.kgoLog))
		}
		return opts
	}
	opts = append(opts,
		kgo.ConsumerGroup(c.group),
		kgo.ConsumeTopics(c.topicsToConsume()...),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(c.onAssigned),
		kgo.OnPartitionsRevoked(c.onRevoked),
		kgo.OnPartitionsLost(c.onLost),
	)
	if c.txnMode { // the session commits offsets in its transactions
		opts = append(opts,
			kgo.TransactionalID(c.sub.mode.txnID),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.RecordPartitioner(pinningPartitioner{c.probeOwn(opts)}),
		)
	} else {
		opts = append(opts, kgo.AutoCommitMarks(), kgo.AutoCommitCallback(c.onAutoCommit))
	}
	if c.sub.kind == subPattern {
		opts = append(opts, kgo.ConsumeRegex())
	}
	if a.cfg.instanceID != "" {
		opts = append(opts, kgo.InstanceID(a.cfg.instanceID+"-"+strconv.Itoa(c.idx)))
	}
	if c.kgoLog != nil { // not in Start's validation; last, after ProducerOpts too (a user's WithLogger)
		opts = append(opts, kgo.WithLogger(c.kgoLog), kgo.WithHooks(&fenceWatch{c: c}))
	}
	return opts
}

// probeOwn reads what the consumer's client takes from the user's options opts, from one probe
// client (probeOpts), once, at Start (a rebuilt Transactional session reuses it): the partitioner
// of a Transactional session's records, which it returns, and the user's kgo.Logger (userLog),
// which recreationWatch passes franz-go's lines to. On options franz-go refuses it returns
// StickyKeyPartitioner and reads no logger, and the client's creation fails with franz-go's error.
func (c *consumer) probeOwn(opts []kgo.Opt) kgo.Partitioner {
	if !c.probed {
		c.probed = true
		c.txnPart = kgo.StickyKeyPartitioner(nil)
		_ = probeOpts(opts, func(cl *kgo.Client) error {
			c.txnPart, c.userLog = partitionerOf(cl), loggerOf(cl)
			return nil
		})
	}
	return c.txnPart
}

// topicsToConsume is what the group subscribes to: the subscription's topics (or its pattern) and
// its RetryTo topic, so the copies it makes are consumed (DESIGN §3.3).
func (c *consumer) topicsToConsume() []string {
	var ts []string
	if c.sub.kind == subPattern {
		ts = []string{c.sub.pattern}
	} else {
		ts = append(ts, c.sub.topics...)
	}
	if t := c.cfg.retryTo; t != "" && !slices.Contains(ts, t) {
		if c.sub.kind == subPattern {
			t = "^" + regexp.QuoteMeta(t) + "$"
		}
		ts = append(ts, t)
	}
	return ts
}

// newPart makes the state of a newly owned partition.
func (c *consumer) newPart(key tp) *partState {
	ps := &partState{tp: key, gen: c.gen.Add(1), oldest: -1, high: -1}
	ps.done.Store(&doneCell{epoch: -1})
	ps.marked = kgo.EpochOffset{Epoch: -1}
	if c.tracked {
		ps.trk = tracker.NewPartition(c.cfg.maxInFlightPerPart + c.app.cfg.maxPollRecords + 1)
	}
	ps.ctx, ps.cancel = context.WithCancelCause(c.workCtx)
	return ps
}

// start launches the consumer's goroutines: lanes, the committer and the poll loop. ctx is the
// App's base context (never cancelled by Start's ctx). For manual partitions, startCtx bounds the
// read of the group's committed offsets.
func (c *consumer) start(startCtx, base context.Context) error {
	if c.manual {
		if err := c.assignManual(startCtx); err != nil {
			return err
		}
	}
	for range c.cfg.workers {
		c.wg.Go(c.lane)
	}
	c.commDone = make(chan struct{})
	c.wg.Go(c.committer)
	pollCtx, stop := context.WithCancel(base)
	c.stopPoll = stop
	go func() {
		defer close(c.pollDone)
		if c.txnMode {
			c.pollTxn(pollCtx, base)
			return
		}
		c.poll(pollCtx)
	}()
	return nil
}

// assignManual reads the group's committed offsets (when a group is named) and starts consuming the
// subscription's partitions from them, or from the start offset.
func (c *consumer) assignManual(ctx context.Context) error {
	topic := c.sub.topics[0]
	start := kgo.NewOffset().AtStart()
	if c.sub.start == Latest {
		start = kgo.NewOffset().AtEnd()
	}
	offsets := make(map[int32]kgo.Offset, len(c.sub.partitions))
	for _, p := range c.sub.partitions {
		offsets[p] = start
	}
	if c.adm != nil {
		resp, err := c.adm.FetchOffsets(kadm.RequireStable(ctx), c.group)
		if err == nil {
			err = resp.Error()
		}
		if errors.Is(err, kerr.GroupIDNotFound) { // kfake's answer for a group with no commits yet
			err = nil
		}
		if err != nil {
			return fmt.Errorf("tidemark: %s: read committed offsets of group %q: %w", c.sub, c.group, err)
		}
		for _, p := range c.sub.partitions {
			if o, ok := resp.Lookup(topic, p); ok && o.At >= 0 {
				offsets[p] = kgo.NewOffset().At(o.At).WithEpoch(o.LeaderEpoch)
			}
		}
		if id, _, ok := c.brokerTopic(ctx, topic); ok {
			c.manualTopicID = id // commitManual commits to this topic only
		}
	}
	for _, p := range c.sub.partitions {
		c.d.add(c.newPart(tp{topic, p}))
	}
	c.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})
	c.readyOnce.Do(func() { close(c.ready) })
	return nil
}

// poll is the poll loop: take everything franz-go has buffered, queue it MaxPollRecords at a time
// (never blocking on a lane), allow rebalancing, repeat until ctx ends (DESIGN §2, §3.6, §3.11).
// franz-go fetches from a broker again only once its buffered fetch has been taken whole: taking
// it at once lets the next fetch overlap the queueing and the handlers. What a partition has no
// room for waits in its backlog, and the poll loop holds off while one is large (waitRoom).
func (c *consumer) poll(ctx context.Context) {
	n := c.app.cfg.maxPollRecords
	for {
		if !c.d.waitRoom(ctx) {
			return
		}
		if err := c.d.fatalErr(); err != nil {
			c.failTrackerFull(err)
			return
		}
		fs := c.cl.PollRecords(ctx, -1) // everything buffered: franz-go fetches the next at once
		if fs.IsClientClosed() {
			c.cl.AllowRebalance()
			return
		}
		c.fetchErrors(fs)
		events, moved, err := c.d.push(fs, n)
		c.cl.AllowRebalance()
		for _, ev := range events {
			c.obs.Delivered(ev)
		}
		if moved {
			c.kick()
		}
		if err != nil {
			c.failTrackerFull(err)
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// failTrackerFull fails the App: a partition's tracker ring overflowed while records were admitted
// (a bug in pausing, DESIGN §3.6).
func (c *consumer) failTrackerFull(err error) {
	c.app.fail(fmt.Errorf("%w: %s: %w", ErrTrackerFull, c.sub, err))
}

// instanceFenced fails the App with ErrInstanceFenced for err, a FENCED_INSTANCE_ID that cl's
// group member got (a fetch's, an OffsetCommit's, a TxnOffsetCommit's), and stops cl's group loop
// at once, so that franz-go does not join again and fence the newer member in turn. A static member
// sends no LeaveGroup. It returns the error the App fails with (unless it failed already).
func (c *consumer) instanceFenced(cl *kgo.Client, err error) error {
	id, _ := cl.OptValue(kgo.InstanceID).(string)
	ferr := fmt.Errorf("%w: %s: instance id %q, group %q: %w", ErrInstanceFenced, c.sub, id, c.group, err)
	c.app.fail(ferr)
	//lint:ignore SA1012 franz-go documents a nil ctx: stop the group loop now, without waiting for it
	_ = cl.LeaveGroupContext(nil)
	return ferr
}

// fenceWatch is a kgo hook on a group subscription's client, one per client made: a group session
// that FENCED_INSTANCE_ID ended (a heartbeat's, a join's; kgo.HookGroupManageError) fails the App
// with ErrInstanceFenced and stops the group loop, also once the poll loop has stopped (a Shutdown
// draining its handlers), when no fetch brings the error any more.
type fenceWatch struct {
	c  *consumer
	cl atomic.Pointer[kgo.Client] // the client it was made for (kgo.HookNewClient)
}

// OnNewClient records the client.
func (w *fenceWatch) OnNewClient(cl *kgo.Client) { w.cl.Store(cl) }

// OnGroupManageError fails the App for a fence, and for an authorization the cluster refuses the
// member (no Read ACL on the group): Start with it while it waits for the first assignment, the App
// after.
func (w *fenceWatch) OnGroupManageError(err error) {
	if cl := w.cl.Load(); cl != nil && errors.Is(err, kerr.FencedInstanceID) {
		w.c.instanceFenced(cl, err)
	}
	if errors.Is(err, kerr.GroupAuthorizationFailed) || errors.Is(err, kerr.TopicAuthorizationFailed) ||
		errors.Is(err, kerr.ClusterAuthorizationFailed) {
		select { // franz-go goes on trying, and the member takes no partition meanwhile
		case <-w.c.ready: // after Start: the App fails, as Start would (helper-143: Running, reading nothing)
			w.c.app.fail(fmt.Errorf("tidemark: %s: %w", w.c.sub, deniedErr(w.c.group, err)))
		default: // Start waits for the first assignment (waitReady)
			select {
			case w.c.denied <- err:
			default:
			}
		}
	}
}

// setPaused pauses or resumes fetching one partition in franz-go. It only takes franz-go's pause
// lock, so it is called under dispatcher.mu, which keeps pauses and resumes in order (and guards
// c.cl).
func (c *consumer) setPaused(p tp, paused bool) {
	m := map[string][]int32{p.topic: {p.partition}}
	if paused {
		c.cl.PauseFetchPartitions(m)
	} else {
		c.cl.ResumeFetchPartitions(m)
	}
}

// kick wakes the committer without blocking.
func (c *consumer) kick() {
	if len(c.wake) > 0 {
		return // already woken
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}
