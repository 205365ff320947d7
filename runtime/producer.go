package runtime

import (
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

	errNilRecord = errors.New("tidemark: publish: nil record")
)

// producer is the App's one producer client. It is created on the first publish, so a
// consume-only App opens no producer connection (DESIGN §3.9).
type producer struct {
	app *App

	mu     sync.RWMutex // held for reading around Produce; for writing to create or close
	cl     *kgo.Client
	slots  chan struct{} // buffer space: one slot per record buffered (MaxBufferedRecords)
	closed bool

	pending   atomic.Int64 // produced and not yet acknowledged or failed
	unflushed atomic.Int64
}

// Publish produces r and waits for the brokers' acknowledgement (acks=all, idempotent). With the
// ctx of a Transactional handler, r is produced inside that handler's transaction (DESIGN §3.4),
// and a publish after the window ended fails with ErrWindowClosed. ctx bounds
// the wait for buffer space and the time r may wait unsent in the buffer; once a request carrying r
// is sent it is not cancelled (an idempotent producer cannot know whether the broker wrote it), so
// Publish may return after ctx ends. QueueTimeout bounds the wait for buffer space (ErrQueueFull).
// Errors wrap franz-go's (errors.Is works); after Shutdown has closed the producer it returns
// ErrClosed; a nil r is an error. Publish works before Start too (to seed a topic, say): it opens
// the producer, which a failed Start or Shutdown closes, so call Shutdown even on an App that never
// started.
func (a *App) Publish(ctx context.Context, r *kgo.Record) error {
	if r == nil {
		return errNilRecord
	}
	if tw := windowOf(ctx); tw != nil {
		return tw.publish(ctx, r) // a Transactional handler's ctx: into its window's transaction
	}
	return a.prod.publish(ctx, r)
}

// PublishJSON encodes v with encoding/json and publishes it to topic with key (nil for none), as
// Publish does.
func PublishJSON(ctx context.Context, app *App, topic string, key []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("tidemark: publish to %s: encode: %w", topic, err)
	}
	return app.Publish(ctx, &kgo.Record{Topic: topic, Key: key, Value: b})
}

// Unflushed returns how many produced records the brokers had not confirmed when Shutdown closed
// the producer after FlushTimeout (some may have been written all the same); 0 before that.
func (a *App) Unflushed() int64 { return a.prod.unflushed.Load() }

// Pending returns how many published records (replies included) are buffered or sent and not yet
// acknowledged by the brokers: a gauge of the producer's backlog.
func (a *App) Pending() int64 { return a.prod.pending.Load() }

func (p *producer) publish(ctx context.Context, r *kgo.Record) error {
	slots, err := p.client()
	if err != nil {
		return err
	}
	if err := p.acquire(ctx, slots); err != nil {
		return fmt.Errorf("tidemark: publish to %s: %w", r.Topic, err)
	}
	done := make(chan error, 1)
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		<-slots
		return ErrClosed
	}
	p.pending.Add(1)
	p.cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
		<-slots
		p.pending.Add(-1)
		done <- err
	})
	p.mu.RUnlock()
	if err := <-done; err != nil {
		if errors.Is(err, kgo.ErrClientClosed) {
			return fmt.Errorf("tidemark: publish to %s: %w: %w", r.Topic, ErrUnflushed, err)
		}
		return fmt.Errorf("tidemark: publish to %s: %w", r.Topic, err)
	}
	return nil
}

// acquire waits for buffer space, at most QueueTimeout when one is set.
func (p *producer) acquire(ctx context.Context, slots chan struct{}) error {
	select {
	case slots <- struct{}{}:
		return nil
	default:
	}
	var timeout <-chan time.Time
	if d := p.app.cfg.queueTimeout; d > 0 {
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
		return context.Cause(ctx)
	}
}

// client returns the producer's buffer slots, creating the client on first use.
func (p *producer) client() (chan struct{}, error) {
	p.mu.RLock()
	cl, slots, closed := p.cl, p.slots, p.closed
	p.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if cl != nil {
		return slots, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if p.cl == nil {
		cl, err := kgo.NewClient(p.opts()...)
		if err != nil {
			return nil, fmt.Errorf("tidemark: producer: %w", err)
		}
		n := int64(50_000) // franz-go's default, if its option value reads differently
		switch v := cl.OptValue(kgo.MaxBufferedRecords).(type) {
		case int64:
			n = v
		case int:
			n = int64(v)
		}
		p.cl, p.slots = cl, make(chan struct{}, max(n, 1))
	}
	return p.slots, nil
}

// opts builds the producer's options: seeds, no linger, the App's ClientOpts without consumer and group
// options (connection settings, TLS, SASL, dialer apply to both), ProducerOpts, then the
// partitioner that pins retry copies to their source partition. Idempotence and acks=all stay
// franz-go's defaults.
func (p *producer) opts() []kgo.Opt {
	// Every publish waits for its acknowledgement, so lingering only adds latency: no linger unless
	// ProducerOpts sets one.
	opts := []kgo.Opt{kgo.SeedBrokers(p.app.cfg.brokers...), kgo.ProducerLinger(0)}
	for _, o := range p.app.cfg.clientOpts {
		switch o.(type) {
		case kgo.ConsumerOpt, kgo.GroupOpt:
			continue
		}
		opts = append(opts, o)
	}
	opts = append(opts, p.app.cfg.producerOpts...)
	return append(opts, kgo.RecordPartitioner(pinningPartitioner{}))
}

// close flushes what is buffered, bounded by FlushTimeout, counts what the brokers did not confirm,
// and closes the client; publishes after it fail with ErrClosed.
func (p *producer) close() error {
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
	n := p.pending.Load()
	p.unflushed.Store(n)
	cl.Close() // fails what is still buffered, so no publisher waits forever
	if n > 0 {
		return fmt.Errorf("%w: %d records after %s: %w", ErrUnflushed, n, p.app.cfg.flushTimeout, flushErr)
	}
	return nil
}
