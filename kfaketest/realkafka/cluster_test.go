package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cluster connects to the multi-broker cluster in KAFKA_BROKERS (make test-real-cluster), or
// skips: these scenarios move leaders between brokers, which kfake's single process cannot show
// and a single broker cannot do.
func cluster(t *testing.T) (*kfaketest.Cluster, *kadm.Client) {
	t.Helper()
	var seeds []string
	for _, s := range strings.Split(os.Getenv("KAFKA_BROKERS"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		t.Skip("needs a real cluster of 3+ brokers in KAFKA_BROKERS: make test-real-cluster")
	}
	c := kfaketest.Connect(t, seeds)
	cl, err := kgo.NewClient(c.ClientOpts()...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	bs, err := adm.ListBrokers(t.Context())
	require.NoError(t, err)
	if len(bs) < 3 {
		fmt.Fprintf(os.Stderr, "realkafka: SKIPPED %s: needs 3+ brokers, KAFKA_BROKERS has %d\n", t.Name(), len(bs))
		t.Skipf("needs 3+ brokers, the cluster has %d", len(bs))
	}
	return c, adm
}

// moveLeaders rotates the replica list of every partition of topics (so each gets a new
// preferred leader) and elects the preferred leaders, then waits until every partition is led by
// its new first replica. It returns how many partitions changed leader.
func moveLeaders(t *testing.T, adm *kadm.Client, topics ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	md, err := adm.Metadata(ctx, topics...)
	require.NoError(t, err)
	var req kadm.AlterPartitionAssignmentsReq
	want := map[string]map[int32]int32{}
	before := map[string]map[int32]int32{}
	for _, td := range md.Topics.Sorted() {
		require.NoError(t, td.Err, td.Topic)
		want[td.Topic], before[td.Topic] = map[int32]int32{}, map[int32]int32{}
		for _, pd := range td.Partitions.Sorted() {
			require.GreaterOrEqual(t, len(pd.Replicas), 2, "%s/%d: replication factor 2+ to move a leader", td.Topic, pd.Partition)
			rot := append(slices.Clone(pd.Replicas[1:]), pd.Replicas[0])
			req.Assign(td.Topic, pd.Partition, rot)
			want[td.Topic][pd.Partition] = rot[0]
			before[td.Topic][pd.Partition] = pd.Leader
		}
	}
	resps, err := adm.AlterPartitionAssignments(ctx, req)
	require.NoError(t, err)
	require.NoError(t, resps.Error())
	// The reorder is a metadata change only (same replicas); elect until every preferred leader leads.
	moved := 0
	require.Eventually(t, func() bool {
		_, _ = adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{})
		md, err := adm.Metadata(ctx, topics...)
		if err != nil {
			return false
		}
		moved = 0
		for topic, ps := range want {
			for p, leader := range ps {
				got := md.Topics[topic].Partitions[p].Leader
				if got != leader {
					return false
				}
				if got != before[topic][p] {
					moved++
				}
			}
		}
		return true
	}, 60*time.Second, 250*time.Millisecond, "preferred leaders of %v never led", topics)
	return moved
}

// handled records which offsets a handler saw, and how often.
type handled struct {
	mu sync.Mutex
	n  map[string]int // "topic/partition/offset"
}

func (h *handled) add(r *kgo.Record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)]++
}

func (h *handled) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.n)
}

// requireEach fails unless every offset of recs was handled exactly once.
func (h *handled) requireEach(t *testing.T, recs []*kgo.Record) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	var missing, twice []string
	for _, r := range recs {
		k := fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)
		switch h.n[k] {
		case 0:
			missing = append(missing, k)
		case 1:
		default:
			twice = append(twice, fmt.Sprintf("%s x%d", k, h.n[k]))
		}
	}
	require.Empty(t, missing, "records never handled")
	require.Empty(t, twice, "records handled more than once")
	require.Len(t, h.n, len(recs), "handled records that were not produced")
}

// requireAll fails unless every offset of recs was handled at least once.
func (h *handled) requireAll(t *testing.T, recs []*kgo.Record) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	var missing []string
	for _, r := range recs {
		if k := fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset); h.n[k] == 0 {
			missing = append(missing, k)
		}
	}
	require.Empty(t, missing, "records never handled")
	require.Len(t, h.n, len(recs), "handled records that were not produced")
}

// produce writes n keyed records spread over partitions 0..parts-1 and returns them (offsets set).
func produce(t *testing.T, c *kfaketest.Cluster, topic string, parts int32, batch string, n int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for p := range parts {
		var vs []string
		for i := range n / int(parts) {
			vs = append(vs, fmt.Sprintf("%s-%d-%03d", batch, p, i))
		}
		out = append(out, c.ProduceValues(t, topic, p, vs...)...)
	}
	return out
}

// A consumer group of one, then two members, runs while the leaders of the input partitions,
// the group coordinators (__consumer_offsets) and, in the Transactional mode, the output
// partitions and the transaction coordinators (__transaction_state) move to other brokers: every
// record is handled, the group commits every partition's end, and the read_committed output holds
// exactly one output per input. In the Tracked mode every record is handled exactly once: a
// revoke drains the running handlers and commits them before the next owner starts there.
func TestClusterLeaderMove(t *testing.T) {
	for _, mode := range []string{"Tracked", "Transactional"} {
		t.Run(mode, func(t *testing.T) { leaderMove(t, mode == "Transactional") })
	}
}

func leaderMove(t *testing.T, txn bool) {
	c, adm := cluster(t)
	const parts, n = 3, 300
	in, out, g := c.Name("in"), c.Name("out"), c.Name("g")
	c.CreateTopic(t, in, parts)
	if txn {
		c.CreateTopic(t, out, parts)
	}
	first := produce(t, c, in, parts, "a", n)

	var h handled
	member := func(name string) (*runtime.App, func()) {
		commit := runtime.Tracked
		if txn {
			commit = runtime.Transactional(c.Name("tx-" + name))
		}
		app := runtime.New(runtime.Brokers(c.Addrs()...), runtime.ClientOpts(c.ClientOpts()...))
		runtime.Handle(app, runtime.Topic(in).Group(g).Commit(commit),
			runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
				time.Sleep(10 * time.Millisecond) // slow enough that the moves happen mid-stream
				r := d.Record()
				if txn {
					if err := app.Publish(ctx, &kgo.Record{Topic: out, Key: r.Key, Value: append([]byte("out-"), r.Value...)}); err != nil {
						return err
					}
				}
				h.add(r)
				return nil
			}), runtime.Workers(4))
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		require.NoError(t, app.Start(ctx))
		var once sync.Once
		stop := func() {
			once.Do(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				require.NoError(t, app.Shutdown(ctx), "%s's shutdown", name)
			})
		}
		t.Cleanup(stop)
		return app, stop
	}

	_, stopA := member("a")
	require.Eventually(t, func() bool { return h.total() > 0 }, 30*time.Second, 5*time.Millisecond, "nothing handled")
	topics := []string{in, "__consumer_offsets"}
	if txn {
		topics = append(topics, out, "__transaction_state")
	}
	t.Logf("handled %d of %d when the leaders move", h.total(), len(first))
	moved := moveLeaders(t, adm, topics...)
	t.Logf("%d partitions changed leader; handled %d", moved, h.total())
	require.Positive(t, moved)

	// a second member joins, the second batch arrives, the leaders move again, the first member leaves
	_, stopB := member("b")
	second := produce(t, c, in, parts, "b", n)
	all := append(first, second...)
	moveLeaders(t, adm, topics...)
	t.Logf("handled %d of %d after the second move", h.total(), len(all))
	stopA()

	// the end of each partition, from the produced offsets: kfaketest.HighWatermarks asks each
	// partition's leader once, and fails on a leader that just moved
	end := map[int32]int64{}
	for _, r := range all {
		end[r.Partition] = max(end[r.Partition], r.Offset+1)
	}
	var last map[int32]int64
	require.Eventually(t, func() bool {
		got, err := c.CommittedContext(t.Context(), g, in)
		if err == nil {
			last = got
		}
		return err == nil && maps(got, end)
	}, 60*time.Second, 50*time.Millisecond, "the group never committed %v", end)
	t.Logf("committed %v", last)
	stopB()
	if !txn {
		h.requireEach(t, all)
		return
	}
	h.requireAll(t, all) // an aborted window's records are handled again
	var vs, want []string
	for _, r := range c.ReadAll(t, out, true) {
		vs = append(vs, string(r.Value))
	}
	for _, r := range all {
		want = append(want, "out-"+string(r.Value))
	}
	slices.Sort(vs)
	slices.Sort(want)
	require.Equal(t, want, vs, "read_committed output: exactly one per input")
}

func maps(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}
