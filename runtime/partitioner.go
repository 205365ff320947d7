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

// pinningPartitioner honours Record.Partition for records the runtime pins (DESIGN §3.3) and
// partitions every other record with base: the partitioner of the user's options, or franz-go's
// default, StickyKeyPartitioner (keys hashed with murmur2, as Kafka's Java client does).
type pinningPartitioner struct{ base kgo.Partitioner }

func (p pinningPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	base := p.base.ForTopic(topic)
	pp := &pinningTopicPartitioner{base: base}
	if b, ok := base.(kgo.TopicBackupPartitioner); ok {
		return &pinningBackupPartitioner{pinningTopicPartitioner: pp, backup: b}
	}
	return pp
}

// userPartitioner returns the partitioner opts set with kgo.RecordPartitioner, or, if none,
// StickyKeyPartitioner (franz-go's own default, UniformBytesPartitioner, spreads keyless records
// differently; keyed records go to the same partitions). franz-go keeps options opaque, so it is
// read from a client made of opts' producer and client options and closed unused (no I/O); it
// returns that client's error if opts are invalid.
func userPartitioner(opts []kgo.Opt) (kgo.Partitioner, error) {
	probe := []kgo.Opt{kgo.RecordPartitioner(noPartitioner{})}
	for _, o := range opts {
		switch o.(type) {
		case kgo.ConsumerOpt, kgo.GroupOpt: // a client with these starts consuming
			continue
		}
		probe = append(probe, o)
	}
	if len(probe) == 1 {
		return kgo.StickyKeyPartitioner(nil), nil
	}
	cl, err := kgo.NewClient(probe...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	switch p := cl.OptValue(kgo.RecordPartitioner).(type) {
	case noPartitioner, nil:
		return kgo.StickyKeyPartitioner(nil), nil
	case kgo.Partitioner:
		return p, nil
	}
	return kgo.StickyKeyPartitioner(nil), nil
}

// noPartitioner is userPartitioner's mark for "opts set no partitioner"; it partitions nothing.
type noPartitioner struct{}

func (noPartitioner) ForTopic(string) kgo.TopicPartitioner { return nil }

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

// pinningBackupPartitioner is pinningTopicPartitioner over a base that partitions by how many
// records each partition has buffered (kgo.TopicBackupPartitioner: franz-go's UniformBytesPartitioner
// and LeastBackupPartitioner). franz-go then calls only PartitionByBackup, and such a base's
// Partition panics.
type pinningBackupPartitioner struct {
	*pinningTopicPartitioner
	backup kgo.TopicBackupPartitioner
}

func (p *pinningBackupPartitioner) PartitionByBackup(r *kgo.Record, n int, it kgo.TopicBackupIter) int {
	if isPinned(r) {
		return int(r.Partition)
	}
	return p.backup.PartitionByBackup(r, n, it)
}
