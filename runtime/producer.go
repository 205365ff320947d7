package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	// ErrQueueFull is returned by Publish when no buffer space freed up within QueueTimeout.
	ErrQueueFull = errors.New("tidemark: producer queue full")

	// ErrUnflushed is wrapped by Shutdown (and Run) when produced records were not confirmed by the
	// brokers before FlushTimeout passed, and by each Publish of such a record; App.Unflushed says
	// how many (DESIGN §3.7, §3.9). Unconfirmed is not unwritten: a record sent before the producer
	// closed may have been written all the same.
	ErrUnflushed = errors.New("tidemark: produced records not flushed")

	// ErrUnconfirmed is wrapped, with ctx's error, by a Publish whose ctx ended before the brokers
	// answered for its record: franz-go holds the record until an answer, so it may be written all
	// the same (an idempotent producer does not take back a request it sent, and franz-go reads a
	// record's ctx only while the record leads its batch). The record stays franz-go's until then,
	// counted by App.Pending: publish a new record rather than that one again.
	ErrUnconfirmed = errors.New("tidemark: publish not confirmed by the brokers")

	// ErrInvalidRecord is wrapped by a Publish of a record that cannot be produced as it is: a nil
	// record, or one that names no topic when the options set no kgo.DefaultProduceTopic. Nothing
	// is handed to franz-go; with a Transactional handler's ctx the window aborts, as on any failed
	// publish (docs/transactions.md, Aborts).
	ErrInvalidRecord = errors.New("tidemark: invalid record")

	errNilRecord = fmt.Errorf("%w: nil", ErrInvalidRecord)
	errNoTopic   = fmt.Errorf("%w: no topic, and no kgo.DefaultProduceTopic in the producer's options", ErrInvalidRecord)
)

// producer is the App's one producer client. It is created on the first publish, so a
// consume-only App opens no producer connection (DESIGN §3.9).
type producer struct {
	app *App

	// mu guards cl, slots and closed: read by every publish, written to create or close. It is never
	// held across franz-go's Produce, which blocks while the buffer is full (MaxBufferedBytes).
	mu     sync.RWMutex
	cl     *kgo.Client
	slots  chan struct{} // buffer space: one slot per record buffered (MaxBufferedRecords)
	closed bool
	sent   sync.WaitGroup // records handed to Produce whose promise has not run; added to only while open
	purges sync.WaitGroup // purges of re-created topics (topicRecreated) under way

	pending   atomic.Int64 // produced and not yet acknowledged or failed
	unflushed atomic.Int64 // records the close failed (ErrClientClosed): their Publishes returned ErrUnflushed (or ErrUnconfirmed before)

	closeOnce sync.Once
	closeErr  error

	probeMu  sync.Mutex      // guards the four below; never held with mu by anyone but client
	probed   bool            // checkOpts ran
	base     kgo.Partitioner // the user's partitioner (partitionerOf)
	userLog  kgo.Logger      // the user's kgo.Logger (loggerOf), nil if none
	probeErr error           // what checkOpts found wrong with the user's options
	defTopic string          // the user's kgo.DefaultProduceTopic, "" if none
}

// Publish produces r and waits for the brokers' acknowledgement (acks=all, idempotent). With the
// ctx of a Transactional handler, r is produced inside that handler's transaction (DESIGN §3.4),
// and a publish after the window ended fails with ErrWindowClosed. ctx bounds the whole call: the
// wait for buffer space and the wait for the brokers' answer. When ctx ends before the answer,
// Publish waits up to 100 ms more for franz-go to fail r (it does at once for a record it has not
// sent that waits for its topic's metadata), then returns an error wrapping ErrUnconfirmed and
// ctx's error: r may be written all the same (a request carrying r is never taken back, and a
// record that does not lead its batch goes out with it), and it stays franz-go's until franz-go is
// done with it (App.Pending counts it; Shutdown's flush waits for it up to FlushTimeout). In a
// transaction the window then aborts, as on any failed publish, so nothing r's window wrote
// commits. QueueTimeout bounds the wait for buffer space (ErrQueueFull), in a transaction too.
// r.Context is franz-go's: when it is nil, Produce sets it to ctx for the publish, and it is
// cleared again once franz-go is done with r, so a failed r can be published again with a new ctx
// (not one whose Publish returned ErrUnconfirmed: franz-go may still hold it). r goes to the
// partition the RecordPartitioner of ProducerOpts or ClientOpts chooses (with none, keys hashed as
// Kafka's Java client does, keyless records spread by StickyKeyPartitioner), so r.Partition counts
// only under a partitioner that reads it, such as kgo.ManualPartitioner. Errors wrap franz-go's
// (errors.Is works: a topic that does not exist gives kerr.UnknownTopicOrPartition, once franz-go
// has looked for it kgo.UnknownTopicRetries times, 4 by default, not ErrUnconfirmed: r was never
// sent); after Shutdown has closed the producer it returns ErrClosed; a nil r, or one with no topic
// and no kgo.DefaultProduceTopic in the options, wraps ErrInvalidRecord. A Context r already has is
// kept: franz-go fails r if it ends before r is sent. Publish works before Start too (to seed a
// topic, say): it opens the producer, which a failed Start or Shutdown closes, so call Shutdown
// even on an App that never started. A nil ctx panics, as in Start.
func (a *App) Publish(ctx context.Context, r *kgo.Record) error {
	mustCtx(ctx, "Publish")
	if tw := windowOf(ctx); tw != nil {
		return tw.publish(ctx, r) // a Transactional handler's ctx: into its window's transaction
	}
	if err := checkRecord(r, a.prod.defaultTopic); err != nil {
		return err
	}
	return a.prod.publish(ctx, r)
}

// PublishJSON encodes v with encoding/json and publishes it to topic with key (nil for none), as
// Publish does.
func PublishJSON(ctx context.Context, app *App, topic string, key []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("tidemark: publish to %q: encode: %w", topic, err)
	}
	return app.Publish(ctx, &kgo.Record{Topic: topic, Key: key, Value: b})
}

// Unflushed returns how many produced records the brokers had not confirmed when Shutdown closed
// the producer after FlushTimeout (some may have been written all the same); 0 before that.
func (a *App) Unflushed() int64 { return a.prod.unflushed.Load() }

// Pending returns how many published records (replies, retry copies and dead letters included, in
// Transactional sessions too) have been handed to franz-go and are not yet acknowledged by the
// brokers (buffered, waiting in franz-go for buffer bytes under MaxBufferedBytes, or sent): a gauge
// of the producers' backlog. A Publish still waiting for one of the MaxBufferedRecords slots (up to
// QueueTimeout) is not counted yet.
func (a *App) Pending() int64 { return a.prod.pending.Load() }

// publish produces r and waits for the answer (produce). A retry copy pinned to a partition the
// producer did not know yet is produced again, once, as soon as it does (awaitPartition). A record
// failed for another record's ctx is produced again, as often as that happens before ctx ends
// (cutByAnother).
func (p *producer) publish(ctx context.Context, r *kgo.Record) error {
	pn, topic, partition := pinOf(r), r.Topic, r.Partition // read before franz-go has r
	cl, err := p.produce(ctx, r)
	for cutByAnother(ctx, r, err) {
		cl, err = p.produce(ctx, r)
	}
	if err != nil && pn != nil && !errors.Is(err, ErrUnconfirmed) && pn.beyond.Swap(false) &&
		awaitPartition(ctx, cl, topic, partition) {
		_, err = p.produce(ctx, r)
	}
	return err
}

// cutByAnother reports whether err, what franz-go answered for r, is the end of another record's
// ctx: franz-go fails every record buffered for a partition, unsent, once the ctx of the first
// record of its batch has ended (kgo.Client.Produce: "Only the first record's context in a batch
// is considered"), so a Publish with a short ctx leading a lingering batch failed the Publishes,
// retry copies and dead letters behind it with its error (helper-137: four records published with
// context.Background failed with context deadline exceeded, none written). r was not sent: it can
// be produced again. Neither ctx nor r.Context, the ctxs franz-go reads for r, has ended.
func cutByAnother(ctx context.Context, r *kgo.Record, err error) bool {
	return (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) &&
		!errors.Is(err, ErrUnconfirmed) && ctx.Err() == nil && (r.Context == nil || r.Context.Err() == nil)
}

// produce hands r to the producer's client, which it returns, and waits for the brokers' answer
// (awaitProduce).
func (p *producer) produce(ctx context.Context, r *kgo.Record) (*kgo.Client, error) {
	cl, slots, err := p.client()
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil { // nothing handed to franz-go: not ErrUnconfirmed
		return cl, fmt.Errorf("tidemark: publish to %q: %w", r.Topic, ctxError(ctx))
	}
	if err := acquireSlot(ctx, slots, p.app.cfg.queueTimeout); err != nil {
		return cl, fmt.Errorf("tidemark: publish to %q: %w", r.Topic, err)
	}
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		<-slots
		return cl, ErrClosed
	}
	p.sent.Add(1) // before close sets closed: its Wait sees this record
	p.pending.Add(1)
	p.mu.RUnlock()
	own, topic := r.Context == nil, r.Topic // franz-go sets Context to ctx: cleared in the promise
	done := make(chan error, 1)
	cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
		if own {
			r.Context = nil
		}
		<-slots
		if errors.Is(err, kgo.ErrClientClosed) {
			p.unflushed.Add(1)
		}
		p.pending.Add(-1)
		p.sent.Done()
		done <- err
	})
	switch err = awaitProduce(ctx, done); {
	case errors.Is(err, kgo.ErrClientClosed):
		return cl, fmt.Errorf("tidemark: publish to %q: %w: %w", topic, ErrUnflushed, err)
	case err != nil:
		return cl, fmt.Errorf("tidemark: publish to %q: %w", topic, err)
	}
	return cl, nil
}

// answerGrace is how long a publish whose ctx ended still waits for franz-go's answer: franz-go
// fails a record it has not sent once its ctx ends (at once while the record waits for its
// topic's metadata; when it cuts the record's batch otherwise), a definite answer worth the wait.
const answerGrace = 100 * time.Millisecond

// awaitProduce waits for a produce's answer on done, or for ctx's end and answerGrace after it, and
// returns the answer (with ctx's cause beside a failure ctx's end made: withCause), or, with no
// answer by then, an error wrapping ErrUnconfirmed and ctx's error (ctxError): the produce goes on
// in franz-go.
func awaitProduce(ctx context.Context, done <-chan error) error {
	select {
	case err := <-done:
		return withCause(ctx, err)
	case <-ctx.Done():
	}
	t := time.NewTimer(answerGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return withCause(ctx, err)
	case <-t.C:
		return fmt.Errorf("%w: %w", ErrUnconfirmed, ctxError(ctx))
	}
}

// acquireSlot waits for buffer space: a slot of slots, which hold one per record franz-go may
// buffer (MaxBufferedRecords), released by the record's promise. It waits at most d (QueueTimeout)
// when d > 0, then fails with ErrQueueFull, and returns ctx's cause if ctx ends first.
func acquireSlot(ctx context.Context, slots chan struct{}, d time.Duration) error {
	select {
	case slots <- struct{}{}:
		return nil
	default:
	}
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case slots <- struct{}{}:
		return nil
	case <-timeout:
		return ErrQueueFull
	case <-ctx.Done():
		return ctxError(ctx)
	}
}

// withCause returns err, a produce's failure, with ctx's cause beside it if ctx's end made it fail
// and ctx has one (context.WithCancelCause, WithTimeoutCause): errors.Is finds both (ctxError).
// franz-go fails a produce whose ctx ended with ctx.Err() alone (helper-98: a Publish with a
// cancelled cause said only "context canceled").
func withCause(ctx context.Context, err error) error {
	switch {
	case err == nil || ctx.Err() == nil || !errors.Is(err, ctx.Err()):
		return err
	case err == ctx.Err():
		return ctxError(ctx)
	case !errors.Is(err, context.Cause(ctx)):
		return fmt.Errorf("%w: %w", err, context.Cause(ctx))
	}
	return err
}

// client returns the producer's client and buffer slots, creating the client on first use.
func (p *producer) client() (*kgo.Client, chan struct{}, error) {
	p.mu.RLock()
	cl, slots, closed := p.cl, p.slots, p.closed
	p.mu.RUnlock()
	if closed {
		return nil, nil, ErrClosed
	}
	if cl != nil {
		return cl, slots, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, ErrClosed
	}
	if p.cl == nil {
		base, err := p.checkOpts() // done by Start already, unless this is a Publish before it
		if err != nil {
			return nil, nil, fmt.Errorf("tidemark: producer: %w", err)
		}
		watch := &recreationWatch{user: p.userLog, onRecreated: p.topicRecreated}
		cl, err := kgo.NewClient(append(p.opts(base), kgo.WithLogger(watch))...)
		if err != nil {
			return nil, nil, fmt.Errorf("tidemark: producer: %w", err)
		}
		p.cl, p.slots = cl, bufferSlots(cl)
	}
	return p.cl, p.slots, nil
}

// bufferSlots returns the slots acquireSlot takes for cl: one per record it may buffer
// (kgo.MaxBufferedRecords).
func bufferSlots(cl *kgo.Client) chan struct{} {
	n := int64(50_000) // franz-go's default, if its option value reads differently
	switch v := cl.OptValue(kgo.MaxBufferedRecords).(type) {
	case int64:
		n = v
	case int:
		n = int64(v)
	}
	return make(chan struct{}, max(n, 1))
}

// opts builds the producer's options: seeds, no linger, the App's ClientOpts without consumer and group
// options (connection settings, TLS, SASL, dialer apply to both), ProducerOpts, then the
// partitioner that pins retry copies to their source partition and partitions everything else
// with base (the user's). Idempotence and acks=all stay franz-go's defaults: Start rejects
// options that turn them off (checkOpts).
func (p *producer) opts(base kgo.Partitioner) []kgo.Opt {
	// Every publish waits for its acknowledgement, so lingering only adds latency: no linger unless
	// ProducerOpts sets one.
	opts := []kgo.Opt{kgo.SeedBrokers(p.app.cfg.brokers...), kgo.ProducerLinger(0)}
	opts = append(opts, producerClientOpts(p.app.cfg)...)
	return append(opts, kgo.RecordPartitioner(pinningPartitioner{base}))
}

// producerClientOpts are the user's options the producer takes: ClientOpts without consumer and
// group options, then ProducerOpts.
func producerClientOpts(cfg appConfig) []kgo.Opt {
	var opts []kgo.Opt
	for _, o := range cfg.clientOpts {
		switch o.(type) {
		case kgo.ConsumerOpt, kgo.GroupOpt:
			continue
		}
		opts = append(opts, o)
	}
	return append(opts, cfg.producerOpts...)
}

// checkRecord returns an error wrapping ErrInvalidRecord for a record Publish refuses: nil, or with
// no topic when defaultTopic, the producing client's kgo.DefaultProduceTopic, returns "".
func checkRecord(r *kgo.Record, defaultTopic func() string) error {
	switch {
	case r == nil:
		return errNilRecord
	case r.Topic == "" && defaultTopic() == "":
		return errNoTopic
	}
	return nil
}

// defaultTopic returns the kgo.DefaultProduceTopic of the user's options, "" if none (checkOpts).
func (p *producer) defaultTopic() string {
	_, _ = p.checkOpts() // its error is Start's, or the publish's when it opens the client
	p.probeMu.Lock()
	defer p.probeMu.Unlock()
	return p.defTopic
}

// checkOpts checks the user's producer options once, without I/O (probeOpts): franz-go must accept
// them, and they must keep idempotent writes, and with them acks=all, on: a record is settled once
// its retry copy, dead-letter record or reply is acknowledged, which must mean written (DESIGN
// §3.9). They must not set a transactional id either: the App's producer is not transactional,
// and with one every produce outside a transaction fails; nor manual flushing (nothing would flush
// a Publish's record), nor DefaultProduceTopicAlways (records would leave for another topic than
// the one named); nor may ProducerOpts hold consumer or group options, which would make the
// producer consume. It returns their partitioner for the client. Start's validation calls it, or
// a Publish before Start; later calls return the first one's result, so no client comes and goes
// while the App's clients run.
func (p *producer) checkOpts() (kgo.Partitioner, error) {
	p.probeMu.Lock()
	defer p.probeMu.Unlock()
	if !p.probed {
		p.probed = true
		p.base = kgo.StickyKeyPartitioner(nil)
		var errs []error // every problem, joined
		for i, o := range p.app.cfg.producerOpts {
			switch o.(type) {
			case kgo.ConsumerOpt, kgo.GroupOpt:
				errs = append(errs, fmt.Errorf("option %d is a consumer or group option (kgo.ConsumerOpt, kgo.GroupOpt): give it to ClientOpts or a subscription's Config", i+1))
			}
		}
		if opts := producerClientOpts(p.app.cfg); len(opts) > 0 { // the probe leaves those out
			errs = append(errs, probeOpts(opts, func(cl *kgo.Client) error {
				p.base, p.userLog = partitionerOf(cl), loggerOf(cl)
				p.defTopic, _ = cl.OptValue(kgo.DefaultProduceTopic).(string)
				return producerClientErr(cl)
			}))
		}
		p.probeErr = errors.Join(errs...)
	}
	return p.base, p.probeErr
}

var (
	// errIdempotenceOff is checkOpts's refusal of kgo.DisableIdempotentWrite.
	errIdempotenceOff = errors.New("kgo.DisableIdempotentWrite: Tidemark settles records on acknowledged writes, which need idempotent writes with acks=all")
	// errTransactionalIDOpt is checkOpts's refusal of kgo.TransactionalID.
	errTransactionalIDOpt = errors.New("kgo.TransactionalID: the App's producer is not transactional (every Publish outside a transaction would fail); give a subscription Commit(runtime.Transactional(id)) instead")
	// errManualFlushingOpt is checkOpts's refusal of kgo.ManualFlushing.
	errManualFlushingOpt = errors.New("kgo.ManualFlushing: Publish waits for the brokers' acknowledgement, and nothing would flush what it buffered (retry copies, dead letters and replies alike)")
	// errDefaultTopicAlwaysOpt is checkOpts's refusal of kgo.DefaultProduceTopicAlways.
	errDefaultTopicAlwaysOpt = errors.New("kgo.DefaultProduceTopicAlways: it would send every record, retry copies, dead letters and replies included, to the default topic instead of the one the runtime names")
)

// producerClientErr returns checkOpts's refusals of cl's options, joined: errIdempotenceOff,
// errTransactionalIDOpt, and publishRefusals'.
func producerClientErr(cl *kgo.Client) error {
	var errs []error
	if off, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); off {
		errs = append(errs, errIdempotenceOff)
	}
	if id, _ := cl.OptValue(kgo.TransactionalID).(string); id != "" {
		errs = append(errs, errTransactionalIDOpt)
	}
	return errors.Join(append(errs, publishRefusals(cl)...)...)
}

// publishRefusals returns the refusals of cl's options that no client producing Tidemark's records
// may have, the App's producer or a Transactional session: errManualFlushingOpt,
// errDefaultTopicAlwaysOpt.
func publishRefusals(cl *kgo.Client) []error {
	var errs []error
	if manual, _ := cl.OptValue(kgo.ManualFlushing).(bool); manual {
		errs = append(errs, errManualFlushingOpt)
	}
	if always, _ := cl.OptValue(kgo.DefaultProduceTopicAlways).(bool); always {
		errs = append(errs, errDefaultTopicAlwaysOpt)
	}
	return errs
}

// close flushes what is buffered, bounded by FlushTimeout, closes the client, which fails what the
// brokers did not confirm (counted in unflushed), and waits for every publish's promise; publishes
// after it fail with ErrClosed. Later calls return the first one's result.
func (p *producer) close() error {
	p.closeOnce.Do(func() { p.closeErr = p.shut() })
	return p.closeErr
}

func (p *producer) shut() error {
	p.mu.Lock()
	p.closed = true
	cl := p.cl
	p.mu.Unlock()
	if cl == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.app.cfg.flushTimeout)
	defer cancel()
	flushErr := cl.Flush(ctx)
	cl.Close() // fails what is buffered, sent or blocked in Produce: franz-go finishes every promise
	p.sent.Wait()
	p.purges.Wait() // a purge returns once the client is closed
	if n := p.unflushed.Load(); n > 0 {
		return fmt.Errorf("%w: %d records not acknowledged when the producer closed (FlushTimeout %s): %w",
			ErrUnflushed, n, p.app.cfg.flushTimeout, cmp.Or(flushErr, kgo.ErrClientClosed))
	}
	return nil
}
