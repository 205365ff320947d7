package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/internal/probe"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// State is an App's lifecycle state, reported by App.State.
type State uint8

const (
	StateNew          State = iota // built by New, not started
	StateStarting                  // in Start
	StateRunning                   // Start returned nil
	StateShuttingDown              // in Shutdown
	StateStopped                   // Shutdown finished without a fatal error
	StateFailed                    // Start failed, or a fatal error stopped the App
)

// String returns the state's name, e.g. "Running".
func (s State) String() string {
	return [...]string{"New", "Starting", "Running", "ShuttingDown", "Stopped", "Failed"}[s]
}

// An App is a Tidemark consumer service: its subscriptions, their clients, lanes and committers.
// Build it with New, register handlers with Handle, then Run it (or Start and Shutdown). An App is
// started once.
type App struct {
	cfg appConfig
	log *slog.Logger

	mu          sync.Mutex
	regs        []registration
	state       State
	reason      error
	consumers   []*consumer
	prod        producer
	started     bool // Start was called: Handle may no longer register
	supervising bool

	fatalOnce sync.Once
	fatalErr  error
	fatal     chan struct{} // closed by the first fatal error

	shutdownStarted atomic.Bool   // set under mu, with the state, by the first Shutdown
	stopping        chan struct{} // closed when Shutdown begins
	stopped         chan struct{} // closed when Shutdown has finished
	startDone       chan struct{} // closed when Start returns (Shutdown waits for it)
	shutdownErr     error
	// failedWhileStopping: the fatal error that first happened during the shutdown; Shutdown
	// returns it with shutdownErr (Run returns the fatal error on its own)
	failedWhileStopping error
	supDone             chan struct{}
}

// New returns an App configured by opts. It only records: Start validates and reports every
// problem at once, a nil option among them (a *ConfigError naming New and its position, from 1).
func New(opts ...Option) *App {
	cfg := defaultAppConfig()
	for i, o := range opts {
		if o == nil { // reported by Start
			cfg.nilOpts = append(cfg.nilOpts, configErr("New", "option %d is nil", i+1))
			continue
		}
		o.applyApp(&cfg)
	}
	log := cfg.logger
	if log == nil {
		log = slog.Default()
	}
	a := &App{
		cfg:       cfg,
		log:       log,
		fatal:     make(chan struct{}),
		stopping:  make(chan struct{}),
		stopped:   make(chan struct{}),
		supDone:   make(chan struct{}),
		startDone: make(chan struct{}),
	}
	a.prod.app = a
	return a
}

// State returns the App's lifecycle state and, for StateFailed, the reason.
func (a *App) State() (State, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state, a.reason
}

func (a *App) setState(s State, reason error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state == StateFailed {
		return
	}
	a.state, a.reason = s, reason
}

// Done returns a channel closed once the App has stopped (after Shutdown finished, whether called
// by the user, by Run, or after a fatal error).
func (a *App) Done() <-chan struct{} { return a.stopped }

// Start validates the configuration (every problem joined, each a *ConfigError, before any I/O),
// creates one client per subscription, and returns once every group subscription has joined its
// group and received its first assignment (possibly empty), manual subscriptions have read their
// committed offsets, and pattern subscriptions have loaded metadata. ctx bounds start-up only (60s
// when it has no deadline): a cluster that cannot be dialed yet is tried again until then (each
// failure logged at Warn), and on failure everything started is stopped. A topic the cluster does
// not describe to the App's credentials fails Start with a *ConfigError, and a group that refuses
// its member (no Read ACL on the group) fails it at once, wrapping kerr.GroupAuthorizationFailed (a
// refusal after Start fails the App likewise, for good: it does not wait for the ACL to come back);
// without Read on a topic Start succeeds, and each of its partitions logs its fetch error
// (TOPIC_AUTHORIZATION_FAILED) at Warn every 10 s while nothing is read. Start returns ErrStarted
// when called twice (wrapped in an error that says so once the App has stopped), and ErrClosed on
// an App that Shutdown stopped before it started (DESIGN §3.10). A producer opened by a Publish
// before a Start that fails validation is closed (bounded by FlushTimeout); what it did not flush
// joins the configuration errors (ErrUnflushed). A Shutdown called while Start runs ends it: Start
// returns ErrClosed (or the fatal error that ended it) and that Shutdown stops what Start began.
// Stopping a client whose join the group's coordinator still holds (while another member is slow to
// join the rebalance) waits for that join's answer, so a Start that fails then can return up to the
// group's rebalance timeout (kgo.RebalanceTimeout, 60 s by default) after ctx ends. A nil ctx
// panics, as context.WithCancel(nil) does, before the App changes state.
func (a *App) Start(ctx context.Context) error {
	mustCtx(ctx, "Start")
	a.mu.Lock()
	if a.state != StateNew {
		started, state := a.started, a.state
		a.mu.Unlock()
		switch {
		case !started:
			return ErrClosed
		case state == StateStopped || state == StateFailed:
			return fmt.Errorf("%w, and it has stopped (%s): an App starts once, make a new one", ErrStarted, state)
		}
		return ErrStarted
	}
	a.state = StateStarting
	a.started = true
	regs := a.regs
	a.mu.Unlock()
	defer close(a.startDone)

	_, prodErr := a.prod.checkOpts()
	if err := validate(a.cfg, regs, prodErr); err != nil {
		// Stopped as any failed start is, so Done closes. A Publish before Start may have opened the
		// producer: the shutdown closes it, and what it did not flush joins the errors.
		a.fail(err)
		if serr := a.shutdown(context.Background(), callerStart); serr != nil {
			err = errors.Join(err, serr)
			a.markFailed(err)
		}
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
	}
	base := context.WithoutCancel(ctx)
	ctx, cancel := context.WithCancelCause(ctx) // ended by a Shutdown or a fatal error too
	watched := make(chan struct{})
	defer func() { cancel(nil); <-watched }() // nothing of Start's is left when it returns
	go func() {
		defer close(watched)
		select {
		case <-a.stopping:
			cancel(ErrClosed)
		case <-a.fatal:
			cancel(a.fatalError())
		case <-ctx.Done():
		}
	}()
	a.mu.Lock()
	a.supervising = true
	a.mu.Unlock()
	go a.supervise()
	for i, r := range regs {
		if a.shutdownStarted.Load() {
			return a.closedErr() // Shutdown waits for this return, then stops what was made
		}
		c, err := newConsumer(a, i, r, base)
		if err != nil {
			return a.abortStart(err)
		}
		a.mu.Lock()
		a.consumers = append(a.consumers, c)
		a.mu.Unlock()
	}
	if err := a.checkTopics(ctx); err != nil {
		return a.abortStart(err)
	}
	for _, c := range a.consumers {
		if a.shutdownStarted.Load() {
			return a.closedErr()
		}
		if err := c.start(ctx, base); err != nil {
			return a.abortStart(err)
		}
	}
	for _, c := range a.consumers {
		if err := c.waitReady(ctx); err != nil {
			return a.abortStart(fmt.Errorf("tidemark: start: %s: %w", c.sub, err))
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.shutdownStarted.Load() {
		return a.closedErr()
	}
	if a.state != StateFailed {
		a.state = StateRunning
	}
	return nil
}

func (a *App) markFailed(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.state, a.reason = StateFailed, err
}

// abortStart stops what Start started, records the failure and returns it (the fatal error that
// ended Start, if one did). If a Shutdown began meanwhile it only returns: that Shutdown waits for
// Start to return, then stops what Start made.
func (a *App) abortStart(err error) error {
	if a.shutdownStarted.Load() {
		return a.closedErr()
	}
	a.fail(err)
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.shutdownTimeout)
	defer cancel()
	_ = a.shutdown(ctx, callerStart)
	return a.fatalError()
}

// closedErr is what Start returns when a Shutdown or a fatal error ended it: the fatal error, or
// ErrClosed.
func (a *App) closedErr() error {
	if err := a.fatalError(); err != nil {
		return err
	}
	return ErrClosed
}

// Run starts the App, serves until ctx ends or a fatal error happens (a handler panic under
// PanicFail, a fenced or repeatedly failing Transactional session, a group or transactional id the
// cluster refuses), then shuts down: ShutdownTimeout bounds its drain of running handlers and a
// last Transactional window's barrier (the flush, the final commit and that window's End have their
// own bounds: FlushTimeout, 5 s, WindowTimeout). It returns only after every goroutine the App
// started has returned (franz-go's clients are closed, though a few of their own goroutines may
// take a moment more to end: goleak's retries wait for them): nil after a clean stop, the fatal
// error (a *PanicError, for instance) otherwise, joined with the shutdown's error. When Start
// fails, Run returns Start's error, ctx ending before Start has finished included: that error wraps
// ctx's (errors.Is(err, context.Canceled)) and the App is Failed. A nil ctx panics, as in Start.
func (a *App) Run(ctx context.Context) error {
	mustCtx(ctx, "Run")
	if err := a.Start(ctx); err != nil {
		if !errors.Is(err, ErrStarted) {
			a.waitStopped() // a failed Start, or one a Shutdown ended: that shutdown finishes first
		}
		return err
	}
	select {
	case <-ctx.Done():
	case <-a.fatal:
	case <-a.stopping:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.shutdownTimeout)
	defer cancel()
	_ = a.Shutdown(sctx)
	a.waitStopped() // when another shutdown was first, Shutdown returned at sctx's end: wait for it
	return errors.Join(a.fatalError(), a.shutdownErr)
}

// waitStopped returns once the App has stopped and its supervisor has returned.
func (a *App) waitStopped() {
	<-a.stopped
	<-a.supDoneOrNil()
}

// fail records the first fatal error and starts a graceful shutdown.
func (a *App) fail(err error) {
	a.fatalOnce.Do(func() {
		a.fatalErr = err
		a.markFailed(err)
		close(a.fatal)
	})
}

func (a *App) fatalError() error {
	select {
	case <-a.fatal:
		return a.fatalErr
	default:
		return nil
	}
}

// supervise shuts the App down after a fatal error, for callers that use Start and Shutdown
// without Run.
func (a *App) supervise() {
	defer close(a.supDone)
	select {
	case <-a.fatal:
		select {
		case <-a.startDone:
		case <-a.stopping: // a Start that the error ended is shutting down itself: it waits for this return
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.shutdownTimeout)
		defer cancel()
		_ = a.shutdown(ctx, callerSupervisor)
	case <-a.stopping:
	}
}

// groupOf returns a subscription's consumer group: its own, or DefaultGroup for group
// subscriptions. Manual-partition subscriptions never inherit DefaultGroup.
func (a *App) groupOf(s Subscription) string {
	if s.group != "" || s.kind == subPartitions {
		return s.group
	}
	return a.cfg.defaultGroup
}

// waitReady waits for c's first assignment, which Start returns at: it fails when ctx ends, and at
// once when the cluster refuses c's group member an authorization (deniedErr).
func (c *consumer) waitReady(ctx context.Context) error {
	if c.sub.kind == subPattern {
		return c.waitPatternReady(ctx)
	}
	select {
	case <-c.ready:
		return nil
	case err := <-c.denied:
		return deniedErr(c.group, err)
	case <-ctx.Done():
		return fmt.Errorf("no assignment from group %q: %w", c.group, context.Cause(ctx))
	}
}

// deniedErr is Start's error when the cluster refused the group's member an authorization (no Read
// ACL on the group, say): franz-go would go on trying until Start's ctx ended (helper-141).
func deniedErr(group string, err error) error {
	return fmt.Errorf("group %q: the cluster refused this member: %w", group, err)
}

// missingTopic is a ConfigError's problem for a topic that does not exist: errors.Is finds
// kerr.UnknownTopicOrPartition in it.
type missingTopic string

func (t missingTopic) Error() string { return fmt.Sprintf("topic %q does not exist", string(t)) }
func (missingTopic) Unwrap() error   { return kerr.UnknownTopicOrPartition }

// checkTopics fails Start when a subscribed, RetryTo, DeadLetter or Reply topic does not exist
// (DESIGN §3.3) or the cluster refuses to describe it, a Partitions subscription names a partition
// its topic does not have, or a Pattern subscription would consume its own DeadLetter or Reply
// topic or a topic another subscription of its group reads (patternOverlaps), naming the option and
// the topic, instead of waiting for an assignment or records that never come, retrying a produce
// forever, dead-lettering its dead letters (replying to its replies) forever, or splitting a topic
// between two handlers.
func (a *App) checkTopics(ctx context.Context) error {
	type use struct{ option, topic string }
	var (
		uses   []use
		errs   []error
		shared = map[string]int{} // as Start's validation names them (subName)
	)
	for _, c := range a.consumers {
		shared[c.sub.String()]++
	}
	for _, c := range a.consumers {
		if dl := c.cfg.deadLetter; dl != "" && c.sub.kind == subPattern && c.consumesByPattern(dl) {
			errs = append(errs, configErr(subName(c.sub, shared)+": DeadLetter", "the pattern matches the dead-letter topic %q: "+
				"every dead letter would be read again (exclude it with the pattern or kgo.ConsumeExcludeTopics)", dl))
		}
		if rt := c.cfg.replyTopic; rt != "" && c.sub.kind == subPattern && c.consumesByPattern(rt) {
			errs = append(errs, configErr(subName(c.sub, shared)+": Reply", "the pattern matches the reply topic %q: "+
				"every reply would be handled and replied to again (exclude it with the pattern or kgo.ConsumeExcludeTopics)", rt))
		}
	}
	overlaps, err := a.patternOverlaps(ctx)
	if err != nil {
		return fmt.Errorf("tidemark: start: look up the topics the patterns match: %w", err)
	}
	errs = append(errs, overlaps...)
	for _, c := range a.consumers {
		if c.sub.kind != subPattern {
			for _, t := range c.sub.topics {
				uses = append(uses, use{subName(c.sub, shared), t})
			}
		}
		if t := c.cfg.replyTopic; t != "" {
			uses = append(uses, use{subName(c.sub, shared) + ": Reply", t})
		}
		if t := c.cfg.retryTo; t != "" {
			uses = append(uses, use{subName(c.sub, shared) + ": RetryTo", t})
		}
		if t := c.cfg.deadLetter; t != "" {
			uses = append(uses, use{subName(c.sub, shared) + ": DeadLetter", t})
		}
	}
	if len(uses) == 0 {
		return errors.Join(errs...)
	}
	names := make([]string, len(uses))
	for i, u := range uses {
		names[i] = u.topic
	}
	details, err := a.listTopics(ctx, names)
	if _, ok := errors.AsType[*kadm.AuthError](err); ok && errors.Is(err, kerr.TopicAuthorizationFailed) {
		details, err = a.listEachTopic(ctx, names) // kadm says only that some topic is refused
	}
	if err != nil {
		return fmt.Errorf("tidemark: start: look up the topics the subscriptions use: %w", err)
	}
	for _, u := range uses {
		switch td, ok := details[u.topic]; {
		case !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition):
			errs = append(errs, &ConfigError{Option: u.option, Err: missingTopic(u.topic)})
		case td.Err != nil: // an ACL that hides it (listEachTopic), say: not told as missing
			errs = append(errs, configErr(u.option, "topic %q: %w", u.topic, td.Err))
		}
	}
	for _, c := range a.consumers {
		if c.sub.kind != subPartitions {
			continue
		}
		td, ok := details[c.sub.topics[0]]
		if !ok || td.Err != nil {
			continue // reported above
		}
		for _, p := range c.sub.partitions {
			if _, ok := td.Partitions[p]; !ok {
				errs = append(errs, configErr(subName(c.sub, shared), "topic %q has no partition %d (it has %d)", td.Topic, p, len(td.Partitions)))
			}
		}
	}
	return errors.Join(errs...)
}

// listTopics reads the metadata of the named topics. While no broker can be dialed (connection
// refused, a name that does not resolve yet: a service and its cluster often start together) it
// tries again, after 100 ms doubling to 2 s, each failure logged at Warn, until ctx ends (Start's
// bound): then it returns ctx's cause joined with the last failure. Any other error (a TLS or SASL
// failure, a broker's error) is returned at once.
func (a *App) listTopics(ctx context.Context, names []string) (kadm.TopicDetails, error) {
	adm := kadm.NewClient(a.consumers[0].cl) // not closed: it would close the consumer's client
	var last error
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		details, err := adm.ListTopics(ctx, names...)
		switch {
		case err == nil:
			return details, nil
		case ctx.Err() != nil && last != nil: // err is ctx's own, most likely
			return nil, errors.Join(context.Cause(ctx), last)
		case ctx.Err() != nil || !probe.DialFailed(err):
			return nil, err
		}
		last = err
		a.log.Warn("tidemark: start: the cluster cannot be reached; trying again", "err", err, "after", wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(context.Cause(ctx), last)
		}
	}
}

// listEachTopic lists names one topic at a time, after the cluster refused to describe one of
// them (kadm.ListTopics then fails whole, with a *kadm.AuthError naming no topic): a refused
// topic's TopicDetail carries kerr.TopicAuthorizationFailed.
func (a *App) listEachTopic(ctx context.Context, names []string) (kadm.TopicDetails, error) {
	all := make(kadm.TopicDetails, len(names))
	for _, name := range names {
		if _, ok := all[name]; ok {
			continue
		}
		details, err := a.listTopics(ctx, []string{name})
		switch _, auth := errors.AsType[*kadm.AuthError](err); {
		case auth && errors.Is(err, kerr.TopicAuthorizationFailed):
			all[name] = kadm.TopicDetail{Topic: name, Err: kerr.TopicAuthorizationFailed}
		case err != nil:
			return nil, err
		default:
			maps.Copy(all, details)
		}
	}
	return all, nil
}

// register records a Handle or HandleBatch call. Registering after Start is a programming error: it
// panics, as http.ServeMux does for a bad pattern, rather than being silently ignored.
func (a *App) register(r registration) {
	call := "Handle"
	if r.isBatch {
		call = "HandleBatch"
	}
	if a == nil {
		panic(fmt.Sprintf("tidemark: %s(%s) on a nil App: make it with New", call, r.sub))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		panic(fmt.Sprintf("tidemark: %s(%s) after Start: register every handler before Start", call, r.sub))
	}
	a.regs = append(a.regs, r)
}

// consumesByPattern reports whether the subscription's pattern matches topic and none of the
// client's kgo.ConsumeExcludeTopics does, as franz-go decides what a regex consumer reads.
func (c *consumer) consumesByPattern(topic string) bool {
	if re, err := regexp.Compile(c.sub.pattern); err != nil || !re.MatchString(topic) {
		return false
	}
	for _, e := range c.excluded {
		if re, err := regexp.Compile(e); err == nil && re.MatchString(topic) {
			return false
		}
	}
	return true
}

// mustCtx panics on a nil ctx, naming the method, before it touches the App (helper-121: Start(nil)
// panicked on its first use of ctx, after it had set the App Starting for good).
func mustCtx(ctx context.Context, method string) {
	if ctx == nil {
		panic("tidemark: App." + method + " with a nil context.Context: pass context.Background() or a ctx that ends")
	}
}
