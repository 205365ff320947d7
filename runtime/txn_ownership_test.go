package runtime_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// owns is what a member's Rebalanced events say it owns of topic: assigned, minus revoked and lost.
func (o *observer) owns(topic string) []int32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	own := map[int32]bool{}
	for _, e := range o.rebal {
		for _, p := range e.Partitions[topic] {
			own[p] = e.Kind == "assigned"
		}
	}
	maps.DeleteFunc(own, func(_ int32, owned bool) bool { return !owned })
	return slices.Sorted(maps.Keys(own))
}

// franz-go's GroupTransactSession passes only the first revoke of a transaction on to
// OnPartitionsRevoked (kgo/txn.go: "if s.revoked { return }", reset by End). Member A is
// Transactional; its End(TryAbort) waits for a held produce when B joins (A's first revoke: its
// window aborts) and then C joins (A loses one more partition: the session swallows that revoke).
// Once End returns, A asks the group's coordinator what it owns and drops the partition it was not
// told about: every partition has one owner in the members' own views (helper-99: A kept it for
// good, its view still [0 1 2] beside C's [2 5]).
func TestTransactionalRevokeTheSessionSwallowedIsDropped(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 6), kfaketest.Topic("out", 1))
	c.ProduceValues(t, "in", 0, "x")
	running, gate := make(chan struct{}), make(chan struct{})
	first := true
	oA := &observer{}
	a := runtime.New(appOpts(c, runtime.Observe(oA))...)
	runtime.Handle(a, runtime.Topic("in").Group("g").Commit(runtime.Transactional("tx-a")),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if first { // one lane: no other call runs beside it
				first = false
				close(running)
				<-gate
			}
			return a.Publish(ctx, &kgo.Record{Topic: "out", Value: d.Record().Value})
		}), runtime.WindowTimeout(20*time.Second))
	start(t, a)
	waitClosed(t, running, "A never handled x")
	release := c.HoldProduce()
	defer release()
	close(gate)
	eventually(t, func() bool { return a.Pending() == 1 }, "A's publish is not in flight")

	ackApp := func(o *observer) {
		app := runtime.New(appOpts(c, runtime.Observe(o))...)
		runtime.Handle(app, runtime.Topic("in").Group("g"), runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error { return nil }))
		start(t, app)
	}
	oB, oC := &observer{}, &observer{}
	ackApp(oB)
	eventually(t, func() bool { return len(oB.owns("in")) == 3 && len(oA.owns("in")) == 3 },
		"A and B did not split the partitions: A %v B %v", oA.owns("in"), oB.owns("in"))
	ackApp(oC)
	eventually(t, func() bool { return len(oC.owns("in")) == 2 && len(oB.owns("in")) == 2 },
		"C did not get its share: A %v B %v C %v", oA.owns("in"), oB.owns("in"), oC.owns("in"))
	require.Len(t, oA.owns("in"), 3, "A was told of its second revoke while its End was held: nothing to test")
	release()
	eventually(t, func() bool { return len(oA.owns("in")) == 2 },
		"A still takes itself for the owner of %v (B %v, C %v)", oA.owns("in"), oB.owns("in"), oC.owns("in"))
	all := slices.Concat(oA.owns("in"), oB.owns("in"), oC.owns("in"))
	slices.Sort(all)
	require.Equal(t, []int32{0, 1, 2, 3, 4, 5}, all, "A %v B %v C %v", oA.owns("in"), oB.owns("in"), oC.owns("in"))
}
