package runtime

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// pinnedKey marks, in Record.Context, a record the runtime pins to Record.Partition (a retry copy
// going back to its source partition).
type pinnedKey struct{}

func pinned(ctx context.Context) context.Context { return context.WithValue(ctx, pinnedKey{}, true) }

func isPinned(r *kgo.Record) bool {
	return r.Context != nil && r.Context.Value(pinnedKey{}) != nil
}

// pinningPartitioner honours Record.Partition for records the runtime pins and partitions every
// other record as franz-go's StickyKeyPartitioner does (keys hashed with murmur2, as Kafka's Java
// client does). DESIGN §3.3.
type pinningPartitioner struct{}

func (pinningPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &pinningTopicPartitioner{base: kgo.StickyKeyPartitioner(nil).ForTopic(topic)}
}

type pinningTopicPartitioner struct{ base kgo.TopicPartitioner }

func (p *pinningTopicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return isPinned(r) || p.base.RequiresConsistency(r)
}

func (p *pinningTopicPartitioner) Partition(r *kgo.Record, n int) int {
	if isPinned(r) {
		return int(r.Partition)
	}
	return p.base.Partition(r, n)
}

// OnNewBatch keeps the sticky partitioner's rotation for keyless records.
func (p *pinningTopicPartitioner) OnNewBatch() {
	if nb, ok := p.base.(kgo.TopicPartitionerOnNewBatch); ok {
		nb.OnNewBatch()
	}
}
