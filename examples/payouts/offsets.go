package main

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
)

// offsets reads a cluster's high watermarks and a group's committed offsets. *kfaketest.Cluster
// is one (the embedded cluster); kadmOffsets reads a real cluster.
type offsets interface {
	HighWatermarksContext(ctx context.Context, topic string) (map[int32]int64, error)
	CommittedContext(ctx context.Context, group, topic string) (map[int32]int64, error)
}

// kadmOffsets reads offsets from a real cluster through kadm.
type kadmOffsets struct{ adm *kadm.Client }

// HighWatermarksContext returns the end offset of each of topic's partitions.
func (k kadmOffsets) HighWatermarksContext(ctx context.Context, topic string) (map[int32]int64, error) {
	listed, err := k.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	var first error
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil && first == nil {
			first = fmt.Errorf("end offsets of %s[%d]: %w", o.Topic, o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out, first
}

// CommittedContext returns group's committed offsets for topic (stable ones, as a consumer reads
// them); partitions without one are absent.
func (k kadmOffsets) CommittedContext(ctx context.Context, group, topic string) (map[int32]int64, error) {
	resps, err := k.adm.FetchOffsets(kadm.RequireStable(ctx), group)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	var first error
	resps.Each(func(o kadm.OffsetResponse) {
		if o.Topic != topic {
			return
		}
		if o.Err != nil && first == nil {
			first = fmt.Errorf("committed offset of %s[%d]: %w", o.Topic, o.Partition, o.Err)
		}
		if o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out, first
}

// PartitionOffsets is one partition's committed offset against its high watermark: equal when the
// group has settled everything in it (lag 0).
type PartitionOffsets struct {
	Partition     int32
	Committed     int64 // the next offset the group will read; 0 when it has committed nothing
	HighWatermark int64
}

// positions reads group's position on every partition of topic. It reads the high watermarks
// before and after the committed offsets and reports whether the group has caught up: the
// committed offsets equal both readings. A retry copy is produced before its original settles,
// so a copy made from a record below the first reading shows in the second one.
func positions(ctx context.Context, off offsets, group, topic string) ([]PartitionOffsets, bool, error) {
	before, err := off.HighWatermarksContext(ctx, topic)
	if err != nil {
		return nil, false, err
	}
	committed, err := off.CommittedContext(ctx, group, topic)
	if err != nil {
		return nil, false, err
	}
	after, err := off.HighWatermarksContext(ctx, topic)
	if err != nil {
		return nil, false, err
	}
	caughtUp := maps.Equal(before, after)
	var out []PartitionOffsets
	for _, p := range slices.Sorted(maps.Keys(after)) {
		po := PartitionOffsets{Partition: p, Committed: committed[p], HighWatermark: after[p]}
		caughtUp = caughtUp && po.Committed == po.HighWatermark
		out = append(out, po)
	}
	return out, caughtUp, nil
}
