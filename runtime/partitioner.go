package runtime

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A pin, in Record.Context, marks a record the runtime pins to Record.Partition (a retry copy going
// back to its source partition). beyond is set when the partitioner found that partition beyond
// those franz-go knows of the topic: a partition added since the producer last read its metadata.
type pin struct{ beyond atomic.Bool }

type pinnedKey struct{}

func pinned(ctx context.Context) context.Context {
	return context.WithValue(ctx, pinnedKey{}, new(pin))
}

// pinOf returns r's pin, nil if the runtime does not pin r.
func pinOf(r *kgo.Record) *pin {
	if r.Context == nil {
		return nil
	}
	p, _ := r.Context.Value(pinnedKey{}).(*pin)
	return p
}

func isPinned(r *kgo.Record) bool { return pinOf(r) != nil }

// at returns r's partition, the index franz-go expects of a record that RequiresConsistency among
// the topic's n partitions, noting when franz-go knows too few to hold it.
func (p *pin) at(r *kgo.Record, n int) int {
	if int(r.Partition) >= n {
		p.beyond.Store(true)
	}
	return int(r.Partition)
}

// pinningPartitioner honours Record.Partition for records the runtime pins (DESIGN §3.3) and
// partitions every other record with base: the partitioner of the user's options, or
// StickyKeyPartitioner (keys hashed with murmur2, as Kafka's Java client does) if they set none.
//
// franz-go treats a TopicPartitioner by the optional interfaces it implements: it calls only
// PartitionByBackup on a kgo.TopicBackupPartitioner (whose Partition may panic), and it asks a
// kgo.TopicPartitionerOnNewBatch again for each record that opens a batch. So the wrapper
// implements exactly the ones base's TopicPartitioner does.
type pinningPartitioner struct{ base kgo.Partitioner }

func (p pinningPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	base := p.base.ForTopic(topic)
	pin := pinning{base: base}
	backup, isBackup := base.(kgo.TopicBackupPartitioner)
	newBatch, hasNewBatch := base.(kgo.TopicPartitionerOnNewBatch)
	switch {
	case isBackup && hasNewBatch:
		return &pinningBackupOnNewBatch{pinningBackup{pin, backup}, newBatch}
	case isBackup:
		return &pinningBackup{pin, backup}
	case hasNewBatch:
		return &pinningOnNewBatch{pin, newBatch}
	}
	return &pin
}

type pinning struct{ base kgo.TopicPartitioner }

func (p *pinning) RequiresConsistency(r *kgo.Record) bool {
	return isPinned(r) || p.base.RequiresConsistency(r)
}

// Partition returns r.Partition for a pinned record: with RequiresConsistency true, franz-go's
// choice is an index into all of the topic's partitions, so the index is the partition.
func (p *pinning) Partition(r *kgo.Record, n int) int {
	if pn := pinOf(r); pn != nil {
		return pn.at(r, n)
	}
	return p.base.Partition(r, n)
}

type pinningOnNewBatch struct {
	pinning
	newBatch kgo.TopicPartitionerOnNewBatch
}

func (p *pinningOnNewBatch) OnNewBatch() { p.newBatch.OnNewBatch() }

type pinningBackup struct {
	pinning
	backup kgo.TopicBackupPartitioner
}

func (p *pinningBackup) PartitionByBackup(r *kgo.Record, n int, it kgo.TopicBackupIter) int {
	if pn := pinOf(r); pn != nil {
		return pn.at(r, n)
	}
	return p.backup.PartitionByBackup(r, n, it)
}

type pinningBackupOnNewBatch struct {
	pinningBackup
	newBatch kgo.TopicPartitionerOnNewBatch
}

func (p *pinningBackupOnNewBatch) OnNewBatch() { p.newBatch.OnNewBatch() }

// probeOpts makes a client of opts' producer and client options (consumer and group options
// would start consuming), hands it to fn and closes it unused: no I/O, but a user's kgo hooks see
// a client come and go, so the runtime probes only at Start (or at a Publish before it). franz-go
// keeps options opaque: this is how their values are read. It returns franz-go's error for
// invalid options, else fn's.
func probeOpts(opts []kgo.Opt, fn func(*kgo.Client) error) error {
	probe := []kgo.Opt{kgo.RecordPartitioner(noPartitioner{})}
	for _, o := range opts {
		switch o.(type) {
		case kgo.ConsumerOpt, kgo.GroupOpt:
			continue
		}
		probe = append(probe, o)
	}
	cl, err := kgo.NewClient(probe...)
	if err != nil {
		return err
	}
	defer cl.Close()
	return fn(cl)
}

// partitionerOf returns the partitioner of a probeOpts client: the user's, or StickyKeyPartitioner
// if the options set none (franz-go's own default, UniformBytesPartitioner, spreads keyless
// records differently; keyed records go to the same partitions).
func partitionerOf(cl *kgo.Client) kgo.Partitioner {
	if p, ok := cl.OptValue(kgo.RecordPartitioner).(kgo.Partitioner); ok && p != nil {
		if _, none := p.(noPartitioner); !none {
			return p
		}
	}
	return kgo.StickyKeyPartitioner(nil)
}

// noPartitioner is probeOpts's mark for "the options set no partitioner"; it partitions nothing.
type noPartitioner struct{}

func (noPartitioner) ForTopic(string) kgo.TopicPartitioner { return nil }

// partitionWait bounds how long awaitPartition waits for the producer's metadata to list a
// partition.
const partitionWait = 5 * time.Second

// awaitPartition reports whether the producer knows topic's partition, after a pinned record to it
// failed because the producer knew too few of the topic's partitions (pin.beyond): then the record
// may be produced again. A partition added to a consumed topic is assigned within the consumer's
// MetadataMaxAge, but the producer refreshes its own metadata for the topic only every
// MetadataMaxAge of the App's options (5 minutes by default), and franz-go fails a record whose
// partition is beyond the count it knows at once (helper-115: every copy to an added partition
// failed for that long, and spent its record's attempts in place). Unless a refresh made for
// another record taught it the partition already (helper-117: copies that failed together), it
// forces one and waits, up to partitionWait or ctx's end, for the partition to have a leader.
func awaitPartition(ctx context.Context, cl *kgo.Client, topic string, partition int32) bool {
	known := func() bool {
		leader, _, _ := cl.PartitionLeader(topic, partition)
		return leader >= 0
	}
	if ctx.Err() != nil {
		return false
	}
	if known() {
		return true
	}
	cl.ForceMetadataRefresh()
	ctx, cancel := context.WithTimeout(ctx, partitionWait)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond) // franz-go tells of no metadata update: poll its cache
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
		if known() {
			return true
		}
	}
}
