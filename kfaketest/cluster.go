package kfaketest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/internal/probe"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// SessionTimeout is the group session timeout FastOpts gives clients: 2s, which the cluster accepts
// because New and Start lower kfake's minimum session timeout (6s by default) to minSessionTimeout.
// A member that stops heartbeating (a SIGKILLed child without an InstanceID) leaves its group
// after this long. It is long enough that a client stalled by the race detector on two cores
// does not lose its partitions.
const SessionTimeout = 2 * time.Second

// RebalanceTimeout is the rebalance timeout FastOpts gives clients: 10s, above the runtime's
// default revoke drain bound (5s, DESIGN §3.7), so a member that drains for the whole bound
// still rejoins in time.
const RebalanceTimeout = 10 * time.Second

// WaitTimeout bounds every test-form helper that waits (WaitCommitted, CommitLog.Wait,
// Process.WaitEvents, the produce and read helpers): 30s. A bound only waits for a condition, so a
// long one costs nothing when the condition holds; CI machines are small and run the race detector.
const WaitTimeout = 30 * time.Second

// minSessionTimeout is the smallest session timeout the cluster accepts, so tests may go below
// SessionTimeout with their own kgo.SessionTimeout.
const minSessionTimeout = 100 * time.Millisecond

// ConnectedSessionTimeout is the group session timeout a connected Cluster's ClientOpts (and its
// children's ChildEnv.ClientOpts) give clients instead of SessionTimeout: 10s, since a real broker
// refuses less than its group.min.session.timeout.ms (6s by default).
const ConnectedSessionTimeout = 10 * time.Second

// ErrKfakeOnly is the panic value's cause when a feature that needs the in-process kfake cluster
// (Kfake, CommitLog, FailProduce, FailCommit, HoldProduce) is used on a Cluster made by Connect.
// Check Cluster.Connected first.
var ErrKfakeOnly = errors.New("needs the in-process kfake cluster; unavailable on a connected cluster")

// An Option configures New and Start. Later options add to or override earlier ones.
type Option func(*config)

type config struct {
	brokers   int
	topics    []topicSpec
	kfake     []kfake.Opt
	kgo       []kgo.Opt
	prefix    string
	hasPrefix bool
}

type topicSpec struct {
	name       string
	partitions int32
}

// Topic creates the topic Cluster.Name(name) with the given number of partitions (at least 1) when
// the cluster starts. Repeat it for more topics. On New and Start, whose prefix is "" unless
// Prefix says otherwise, that is name itself.
func Topic(name string, partitions int32) Option {
	return func(c *config) { c.topics = append(c.topics, topicSpec{name, partitions}) }
}

// Brokers sets the number of brokers, overriding the default 1. Partition leaders and group
// coordinators are spread over them.
func Brokers(n int) Option {
	return func(c *config) { c.brokers = n }
}

// Prefix sets the prefix Cluster.Name adds to names (topics created by Topic, and whatever the
// caller names with Name: groups, transactional ids), overriding the default: "" for New and
// Start, a prefix unique to the Connect call for Connect, so runs sharing a real cluster never
// see each other's topics and groups.
func Prefix(p string) Option {
	return func(c *config) { c.prefix, c.hasPrefix = p, true }
}

// KgoOpts adds franz-go options to every client the Cluster opens (its helpers) and to
// ClientOpts, after the cluster's own: connection settings such as TLS or SASL for a connected
// cluster. Children started by Spawn do not get them.
func KgoOpts(opts ...kgo.Opt) Option {
	return func(c *config) { c.kgo = append(c.kgo, opts...) }
}

// KfakeOpts passes options to kfake.NewCluster. They are applied after kfaketest's own
// (kfake.NumBrokers and kfake.GroupMinSessionTimeout), so they override them.
func KfakeOpts(opts ...kfake.Opt) Option {
	return func(c *config) { c.kfake = append(c.kfake, opts...) }
}

// A Cluster is an in-process kfake cluster listening on loopback TCP, with helper clients for
// producing, reading and inspecting it, and a CommitLog of every offset commit it receives.
// Connect makes one that wraps brokers it did not start (a real cluster): the same helpers then
// work through kadm and kgo, and the kfake-only features panic with ErrKfakeOnly.
// Its methods are safe for concurrent use.
type Cluster struct {
	k      *kfake.Cluster // nil when connected
	addrs  []string
	prefix string
	extra  []kgo.Opt    // KgoOpts
	cl     *kgo.Client  // produce and admin helper; never joins a group
	adm    *kadm.Client // over cl
	log    *CommitLog   // nil when connected

	closing  context.Context // done once Close begins: bind ends the helpers' waits with it
	closeNow context.CancelFunc
	adminMu  sync.RWMutex // read-held around kfake's admin calls, which Close (write) must not race: they would block for good

	mu       sync.Mutex
	releases []func()        // HoldProduce releases, run by Close
	holds    []chan struct{} // HoldProduce holds not released yet, oldest first
	holding  bool            // holdProduce, the holds' control, is installed
	asleep   sync.WaitGroup  // held Produce requests asleep in kfake's SleepControl; added to under mu while !closed
	closed   bool
	spawned  int      // Spawn calls, for InstanceIDs
	created  []string // connected: topics the Cluster created, deleted by Close
}

// New starts a cluster for the test and closes it (and its helper clients) in t.Cleanup. Each
// test should have its own. It fails the test if the cluster cannot start.
func New(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	c, err := Start(opts...)
	if err != nil {
		t.Fatalf("kfaketest: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// Start is New for programs (the demo): it starts a cluster and returns it; the caller must call
// Close. It returns an error if kfake cannot listen or a Topic cannot be created.
func Start(opts ...Option) (*Cluster, error) {
	cfg := config{brokers: 1}
	for _, o := range opts {
		o(&cfg)
	}
	kopts := append([]kfake.Opt{
		kfake.NumBrokers(cfg.brokers),
		kfake.GroupMinSessionTimeout(minSessionTimeout),
	}, cfg.kfake...)
	k, err := kfake.NewCluster(kopts...)
	if err != nil {
		return nil, fmt.Errorf("start kfake: %w", err)
	}
	c := &Cluster{k: k, addrs: k.ListenAddrs(), prefix: cfg.prefix, extra: cfg.kgo}
	c.closing, c.closeNow = context.WithCancel(context.Background())
	c.log = newCommitLog(k, c.closing)
	c.log.install()
	for _, tp := range cfg.topics {
		if err := c.createTopic(context.Background(), c.Name(tp.name), tp.partitions); err != nil {
			k.Close()
			return nil, err
		}
	}
	cl, err := kgo.NewClient(append(c.ClientOpts(), kgo.RecordPartitioner(partitioner{}))...)
	if err != nil {
		k.Close()
		return nil, fmt.Errorf("helper client: %w", err)
	}
	c.cl, c.adm = cl, kadm.NewClient(cl)
	return c, nil
}

// Connect wraps brokers the test did not start (a real Kafka cluster, "host:port" seeds) in a
// Cluster, so the same helpers and scenarios run against it: Produce, ReadAll, HighWatermarks,
// Committed, WaitCommitted, CreateTopic and Spawn go through kgo and kadm. The kfake-only
// features (Kfake, CommitLog, FailProduce, FailCommit, HoldProduce) panic with ErrKfakeOnly;
// Connected reports which kind a Cluster is. Names get a prefix unique to this call (Prefix
// overrides it): use Name for every topic, group and transactional id so runs sharing a cluster
// never meet. Topics the Cluster created are deleted in t.Cleanup; groups stay. ClientOpts uses
// ConnectedSessionTimeout. It fails the test if the brokers cannot be reached within WaitTimeout
// or a Topic cannot be created.
func Connect(t testing.TB, brokers []string, opts ...Option) *Cluster {
	t.Helper()
	ctx, cancel := opCtx(t)
	defer cancel()
	c, err := ConnectContext(ctx, brokers, opts...)
	if err != nil {
		t.Fatalf("kfaketest: Connect %v: %v", brokers, err)
	}
	t.Cleanup(c.Close)
	return c
}

// connects numbers Connect calls within the process, for default prefixes.
var connects atomic.Int64

// ConnectContext is Connect for programs: the caller must call Close. ctx bounds reaching the
// brokers and creating the topics. Options that configure kfake (Brokers, KfakeOpts) are ignored.
func ConnectContext(ctx context.Context, brokers []string, opts ...Option) (*Cluster, error) {
	if len(brokers) == 0 {
		return nil, errors.New("no brokers")
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if !cfg.hasPrefix {
		cfg.prefix = "tidemark-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" +
			strconv.FormatInt(connects.Add(1), 10) + "-"
	}
	c := &Cluster{addrs: append([]string(nil), brokers...), prefix: cfg.prefix, extra: cfg.kgo}
	c.closing, c.closeNow = context.WithCancel(context.Background())
	cl, err := kgo.NewClient(append(c.ClientOpts(), kgo.RecordPartitioner(partitioner{}))...)
	if err != nil {
		return nil, fmt.Errorf("helper client: %w", err)
	}
	c.cl, c.adm = cl, kadm.NewClient(cl)
	if err := c.reach(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("reach the brokers: %w", err)
	}
	for _, tp := range cfg.topics {
		if err := c.createTopic(ctx, c.Name(tp.name), tp.partitions); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// reach asks the brokers for their list, again every 100 ms while none can be dialed (brokers
// starting beside the tests), until ctx ends: then ctx's error, with the last dial error.
func (c *Cluster) reach(ctx context.Context) error {
	var last error // the last dial error
	for {
		_, err := c.adm.ListBrokers(ctx)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil && last != nil: // err is ctx's own, most likely
			return fmt.Errorf("%w (last: %w)", ctx.Err(), last)
		case ctx.Err() != nil || !probe.DialFailed(err):
			return err
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Connected reports whether the Cluster wraps brokers it did not start (Connect): the kfake-only
// features are then unavailable.
func (c *Cluster) Connected() bool { return c.k == nil }

// Name returns name with the Cluster's prefix: name itself on New and Start (unless Prefix was
// given), a per-Connect prefix on a connected cluster. Name every topic, group and transactional
// id a test uses with it, and the test runs on a shared cluster too.
func (c *Cluster) Name(name string) string { return c.prefix + name }

// kfakeOnly panics with ErrKfakeOnly, naming what, if the Cluster is connected.
func (c *Cluster) kfakeOnly(what string) {
	if c.k == nil {
		panic(fmt.Errorf("kfaketest: %s: %w", what, ErrKfakeOnly))
	}
}

// Close releases every HoldProduce, closes the helper clients and shuts the cluster down.
// Clients still connected see their connections closed. On a connected cluster it deletes the
// topics the Cluster created (best effort, 10s) and leaves the brokers running. Close is
// idempotent.
func (c *Cluster) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	releases := c.releases
	c.releases = nil
	c.mu.Unlock()
	c.closeNow()
	for _, r := range releases {
		r()
	}
	c.awaitHeld()
	if c.k == nil {
		c.mu.Lock()
		created := c.created
		c.mu.Unlock()
		if len(created) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
			_, _ = c.adm.DeleteTopics(ctx, created...)
			cancel()
		}
		c.cl.Close()
		return
	}
	c.cl.Close()
	c.adminMu.Lock() // no admin call in flight: once closed, kfake would never answer it
	c.k.Close()
	c.adminMu.Unlock()
}

// awaitHeld waits, up to WaitTimeout, until the released Produce requests have left kfake's
// SleepControl. Closing kfake while a released one is still asleep can leak its run loop (kfake
// v0.0.0-20260918054303): SleepControl returns on the closed cluster, the control's goroutine
// takes the control mutex on its way out and leaves its release to the loop, and the loop, which
// may pick the wake-up over the close, blocks on that mutex for good. goleak reports it.
func (c *Cluster) awaitHeld() {
	done := make(chan struct{})
	go func() { c.asleep.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(WaitTimeout):
	}
}

// Addrs returns the brokers' "127.0.0.1:port" addresses, to use as seeds.
func (c *Cluster) Addrs() []string { return append([]string(nil), c.addrs...) }

// Kfake returns the underlying kfake cluster, for what kfaketest does not wrap (controls,
// faults on other requests, GroupInfo, MoveTopicPartition, ...). It panics with ErrKfakeOnly on a
// connected cluster.
func (c *Cluster) Kfake() *kfake.Cluster {
	c.kfakeOnly("Kfake")
	return c.k
}

// ClientOpts returns kgo.SeedBrokers(c.Addrs()...) followed by FastOpts (with
// ConnectedSessionTimeout on a connected cluster) and the KgoOpts given to New or Connect.
// Append your own options after them to override.
func (c *Cluster) ClientOpts() []kgo.Opt {
	opts := append([]kgo.Opt{kgo.SeedBrokers(c.addrs...)}, FastOpts()...)
	if c.k == nil {
		opts = append(opts, kgo.SessionTimeout(ConnectedSessionTimeout))
	}
	return append(opts, c.extra...)
}

// FastOpts returns kgo options that make franz-go react quickly against kfake (DESIGN §3.11):
// MetadataMinAge 50ms, HeartbeatInterval 100ms, FetchMaxWait 50ms, AutoCommitInterval 100ms,
// SessionTimeout (2s) and RebalanceTimeout (10s). They set nothing group-specific beyond timings,
// so they suit plain producers and direct consumers too.
func FastOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.MetadataMinAge(50 * time.Millisecond),
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.FetchMaxWait(50 * time.Millisecond),
		kgo.AutoCommitInterval(100 * time.Millisecond),
		kgo.SessionTimeout(SessionTimeout),
		kgo.RebalanceTimeout(RebalanceTimeout),
	}
}

// CreateTopic creates a topic with the given number of partitions (at least 1), failing the
// test if it cannot (for instance because it exists).
func (c *Cluster) CreateTopic(t testing.TB, name string, partitions int32) {
	t.Helper()
	ctx, cancel := opCtx(t)
	defer cancel()
	if err := c.CreateTopicContext(ctx, name, partitions); err != nil {
		t.Fatalf("kfaketest: CreateTopic: %v", err)
	}
}

// CreateTopicContext is CreateTopic for programs. On kfake the topic is created directly in the
// cluster (no request, so faults and controls do not see it); on a connected cluster with a
// CreateTopics request (the brokers' default replication factor), and it returns once every
// partition has a leader, and Close deletes it. The name is used as given (Name adds the prefix).
// It returns kerr.TopicAlreadyExists if the topic exists, or ctx's error. A topic deleted (with
// kadm, say) and created again with CreateTopic takes the produce helpers' records: their client
// forgets the old topic's ID (one created again by other means is still the old one to them).
func (c *Cluster) CreateTopicContext(ctx context.Context, name string, partitions int32) error {
	ctx, stop, err := c.bind(ctx)
	if err != nil {
		return err
	}
	defer stop()
	return c.createTopic(ctx, name, partitions)
}

func (c *Cluster) createTopic(ctx context.Context, name string, partitions int32) (err error) {
	defer func() {
		if err == nil && c.cl != nil { // a topic deleted and created again: the helpers' client knew its old ID
			c.cl.PurgeTopicsFromProducing(name)
		}
	}()
	if partitions < 1 {
		return fmt.Errorf("create topic %q: need at least 1 partition, got %d", name, partitions)
	}
	if !legalTopic.MatchString(name) || name == "." || name == ".." {
		// What Kafka refuses (kfake would take it): 1 to 249 of [a-zA-Z0-9._-].
		return fmt.Errorf(`create topic %q: %w: a name is 1 to 249 of a-z, A-Z, 0-9, '.', '_' and '-', other than "." and ".."`,
			name, kerr.InvalidTopicException)
	}
	if c.k != nil {
		var err error
		if aerr := c.admin(func() { err = c.k.CreateTopic(name, partitions, nil) }); aerr != nil {
			return aerr
		}
		if err != nil {
			return fmt.Errorf("create topic %q: %w", name, err)
		}
		return nil
	}
	resp, err := c.adm.CreateTopic(ctx, partitions, -1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %q: %w", name, err)
	}
	c.mu.Lock()
	c.created = append(c.created, name)
	c.mu.Unlock()
	// Metadata reaches every broker asynchronously: wait until each partition lists its offsets.
	for {
		if infos, err := c.partitionInfos(ctx, name); err == nil && len(infos) == int(partitions) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create topic %q: waiting for its partitions: %w", name, context.Cause(ctx))
		case <-time.After(pollInterval):
		}
	}
}

// legalTopic matches the topic names Kafka accepts, "." and ".." aside.
var legalTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// opCtx bounds one test-form helper call by WaitTimeout. Not by t.Context(): the testing package
// cancels that before the test's cleanups run, and a helper called from a cleanup must work.
func opCtx(testing.TB) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), WaitTimeout)
}

// ErrClosed is returned (wrapped) by the helpers of a Cluster that was closed.
var ErrClosed = errors.New("kfaketest: the cluster is closed")

// usable returns ctx's error, or ErrClosed once Close has begun: a closed kfake cluster answers
// no request (its admin calls would block for good).
func (c *Cluster) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.closing.Err() != nil {
		return ErrClosed
	}
	return nil
}

// bind returns usable's error, or ctx ended also when the Cluster closes (cause ErrClosed), so a
// helper waiting when Close runs returns instead of polling dead brokers. Call stop when done.
func (c *Cluster) bind(ctx context.Context) (bound context.Context, stop func(), err error) {
	if err := c.usable(ctx); err != nil {
		return nil, nil, err
	}
	bound, cancel := context.WithCancelCause(ctx)
	unhook := context.AfterFunc(c.closing, func() { cancel(ErrClosed) })
	return bound, func() { unhook(); cancel(nil) }, nil
}

// admin runs fn, a call of kfake's admin loop, unless the Cluster is closed: Close waits for it
// before closing kfake, which would never answer it afterwards.
func (c *Cluster) admin(fn func()) error {
	c.adminMu.RLock()
	defer c.adminMu.RUnlock()
	if err := c.usable(context.Background()); err != nil {
		return err
	}
	fn()
	return nil
}
