package kfaketest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
// Process.WaitEvents, the produce and read helpers): 10s.
const WaitTimeout = 10 * time.Second

// minSessionTimeout is the smallest session timeout the cluster accepts, so tests may go below
// SessionTimeout with their own kgo.SessionTimeout.
const minSessionTimeout = 100 * time.Millisecond

// An Option configures New and Start. Later options add to or override earlier ones.
type Option func(*config)

type config struct {
	brokers int
	topics  []topicSpec
	kfake   []kfake.Opt
}

type topicSpec struct {
	name       string
	partitions int32
}

// Topic creates the topic with the given number of partitions (at least 1) when the cluster
// starts. Repeat it for more topics.
func Topic(name string, partitions int32) Option {
	return func(c *config) { c.topics = append(c.topics, topicSpec{name, partitions}) }
}

// Brokers sets the number of brokers, overriding the default 1. Partition leaders and group
// coordinators are spread over them.
func Brokers(n int) Option {
	return func(c *config) { c.brokers = n }
}

// KfakeOpts passes options to kfake.NewCluster. They are applied after kfaketest's own
// (kfake.NumBrokers and kfake.GroupMinSessionTimeout), so they override them.
func KfakeOpts(opts ...kfake.Opt) Option {
	return func(c *config) { c.kfake = append(c.kfake, opts...) }
}

// A Cluster is an in-process kfake cluster listening on loopback TCP, with helper clients for
// producing, reading and inspecting it, and a CommitLog of every offset commit it receives.
// Its methods are safe for concurrent use.
type Cluster struct {
	k     *kfake.Cluster
	addrs []string
	cl    *kgo.Client  // produce and admin helper; never joins a group
	adm   *kadm.Client // over cl
	log   *CommitLog

	mu       sync.Mutex
	releases []func() // HoldProduce releases, run by Close
	closed   bool
	spawned  int // Spawn calls, for InstanceIDs
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
	c := &Cluster{k: k, addrs: k.ListenAddrs()}
	c.log = newCommitLog(k)
	c.log.install()
	for _, tp := range cfg.topics {
		if err := c.createTopic(tp.name, tp.partitions); err != nil {
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

// Close releases every HoldProduce, closes the helper clients and shuts the cluster down.
// Clients still connected see their connections closed. Close is idempotent.
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
	for _, r := range releases {
		r()
	}
	c.cl.Close()
	c.k.Close()
}

// Addrs returns the brokers' "127.0.0.1:port" addresses, to use as seeds.
func (c *Cluster) Addrs() []string { return append([]string(nil), c.addrs...) }

// Kfake returns the underlying kfake cluster, for what kfaketest does not wrap (controls,
// faults on other requests, GroupInfo, MoveTopicPartition, ...).
func (c *Cluster) Kfake() *kfake.Cluster { return c.k }

// ClientOpts returns kgo.SeedBrokers(c.Addrs()...) followed by FastOpts. Append your own
// options after them to override.
func (c *Cluster) ClientOpts() []kgo.Opt {
	return append([]kgo.Opt{kgo.SeedBrokers(c.addrs...)}, FastOpts()...)
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
	if err := c.CreateTopicContext(t.Context(), name, partitions); err != nil {
		t.Fatalf("kfaketest: %v", err)
	}
}

// CreateTopicContext is CreateTopic for programs. The topic is created directly in the cluster
// (no request, so faults and controls do not see it). It returns kerr.TopicAlreadyExists if the
// topic exists, or ctx's error if ctx is already done.
func (c *Cluster) CreateTopicContext(ctx context.Context, name string, partitions int32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.createTopic(name, partitions)
}

func (c *Cluster) createTopic(name string, partitions int32) error {
	if partitions < 1 {
		return fmt.Errorf("create topic %q: need at least 1 partition, got %d", name, partitions)
	}
	if err := c.k.CreateTopic(name, partitions, nil); err != nil {
		return fmt.Errorf("create topic %q: %w", name, err)
	}
	return nil
}

// opCtx bounds one test-form helper call by WaitTimeout.
func opCtx(t testing.TB) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), WaitTimeout)
}
