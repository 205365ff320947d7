package kfaketest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// pollInterval is how often the polling waits (WaitCommitted, Process.WaitEvents) look again.
const pollInterval = 10 * time.Millisecond

// ReadAll reads every partition of topic from its log start to its end as of the call: the high
// watermark, or the last stable offset when committed is true (reading read_committed, so
// aborted records are skipped). Control records (transaction markers) are excluded. Records are
// returned by partition, then offset. It fails the test if the topic does not exist or the end is
// not reached within WaitTimeout (30s). A read_committed read whose last records below the end were
// aborted knows it has passed them only when a later record comes: it waits for the transaction
// that was open at the call to end.
func (c *Cluster) ReadAll(t testing.TB, topic string, committed bool) []*kgo.Record {
	t.Helper()
	ctx, cancel := opCtx(t)
	defer cancel()
	recs, err := c.ReadAllContext(ctx, topic, committed)
	if err != nil {
		t.Fatalf("kfaketest: ReadAll %q: %v", topic, err)
	}
	return recs
}

// ReadAllContext is ReadAll for programs. On ctx's end it returns an error naming, per
// partition, the next offset it still needed and the end it was reading to.
func (c *Cluster) ReadAllContext(ctx context.Context, topic string, committed bool) ([]*kgo.Record, error) {
	ctx, stop, err := c.bind(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	infos, err := c.partitionInfos(ctx, topic)
	if err != nil {
		return nil, err
	}
	next := make(map[int32]int64) // next offset still to see, per partition not yet done
	end := make(map[int32]int64)
	start := make(map[int32]kgo.Offset)
	for _, pi := range infos {
		e := pi.hwm
		if committed {
			e = pi.lso
		}
		if e > pi.logStart {
			next[pi.partition], end[pi.partition] = pi.logStart, e
			start[pi.partition] = kgo.NewOffset().At(pi.logStart)
		}
	}
	if len(next) == 0 {
		return nil, nil
	}
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(append(c.ClientOpts(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(iso),
		kgo.KeepControlRecords(), // markers tell us how far we got even when no data follows them
	)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()

	byPart := make(map[int32][]*kgo.Record)
	for len(next) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w before the end: next offset by partition %v, end %v", context.Cause(ctx), next, end)
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) {
			ferr = errors.Join(ferr, fmt.Errorf("partition %d: %w", p, err))
		})
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			n, ok := next[r.Partition]
			switch {
			case !ok || r.Offset < n:
				return
			case r.Offset >= end[r.Partition]:
				// Past the end: every offset below it was read or skipped. read_committed never
				// delivers an aborted record, and the one just below the end may be one whose abort
				// marker lies past it, behind another producer's transaction that was open at the
				// call (helper-111: the read waited for it until its ctx ended).
				delete(next, r.Partition)
				return
			}
			next[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				byPart[r.Partition] = append(byPart[r.Partition], r)
			}
			if r.Offset+1 >= end[r.Partition] {
				delete(next, r.Partition)
			}
		})
	}
	var out []*kgo.Record
	for _, p := range slices.Sorted(maps.Keys(byPart)) {
		out = append(out, byPart[p]...)
	}
	return out, nil
}

// HighWatermarks returns the high watermark (the offset the next record will get) of every
// partition of topic, read directly from the cluster (with ListOffsets on a connected one, asking
// again while a partition's leader moves, up to WaitTimeout). It fails the test if the topic does not
// exist.
func (c *Cluster) HighWatermarks(t testing.TB, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := opCtx(t)
	defer cancel()
	hw, err := c.HighWatermarksContext(ctx, topic)
	if err != nil {
		t.Fatalf("kfaketest: HighWatermarks: %v", err)
	}
	return hw
}

// HighWatermarksContext is HighWatermarks for programs. It returns an error wrapping
// kerr.UnknownTopicOrPartition for a missing topic, or ctx's error if ctx is already done.
func (c *Cluster) HighWatermarksContext(ctx context.Context, topic string) (map[int32]int64, error) {
	ctx, stop, err := c.bind(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	infos, err := c.partitionInfos(ctx, topic)
	if err != nil {
		return nil, err
	}
	hw := make(map[int32]int64, len(infos))
	for _, pi := range infos {
		hw[pi.partition] = pi.hwm
	}
	return hw, nil
}

// partInfo is where one partition's log starts and ends.
type partInfo struct {
	partition          int32
	logStart, hwm, lso int64 // log start offset, high watermark, last stable offset
}

// partitionInfos reads every partition's offsets: from kfake directly, or with ListOffsets
// requests on a connected cluster. A missing topic is an error wrapping
// kerr.UnknownTopicOrPartition.
func (c *Cluster) partitionInfos(ctx context.Context, topic string) ([]partInfo, error) {
	if c.k != nil {
		var infos []*kfake.PartitionInfo
		if err := c.admin(func() { infos = c.k.PartitionInfos(topic) }); err != nil {
			return nil, err
		}
		if infos == nil {
			return nil, fmt.Errorf("topic %q: %w", topic, kerr.UnknownTopicOrPartition)
		}
		out := make([]partInfo, len(infos))
		for i, pi := range infos {
			out[i] = partInfo{pi.Partition, pi.LogStartOffset, pi.HighWatermark, pi.LastStableOffset}
		}
		return out, nil
	}
	// A partition whose leader just moved answers NOT_LEADER_FOR_PARTITION (and the like) until the
	// client learns the new leader: ask again until ctx ends.
	list := func(fn func(context.Context, ...string) (kadm.ListedOffsets, error)) (map[int32]int64, error) {
		for {
			listed, err := fn(ctx, topic)
			if err != nil {
				return nil, fmt.Errorf("topic %q: %w", topic, err)
			}
			ps, ok := listed[topic]
			if !ok {
				return nil, fmt.Errorf("topic %q: %w", topic, kerr.UnknownTopicOrPartition)
			}
			out := make(map[int32]int64, len(ps))
			var retry error
			for p, o := range ps {
				switch {
				case o.Err != nil && p >= 0 && kerr.IsRetriable(o.Err):
					retry = fmt.Errorf("topic %q partition %d: %w", topic, p, o.Err)
				case o.Err != nil:
					return nil, fmt.Errorf("topic %q partition %d: %w", topic, p, o.Err)
				}
				out[p] = o.Offset
			}
			if retry == nil {
				return out, nil
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("%w (last: %w)", ctx.Err(), retry)
			case <-time.After(pollInterval):
			}
		}
	}
	starts, err := list(c.adm.ListStartOffsets)
	if err != nil {
		return nil, err
	}
	ends, err := list(c.adm.ListEndOffsets)
	if err != nil {
		return nil, err
	}
	stables, err := list(c.adm.ListCommittedOffsets)
	if err != nil {
		return nil, err
	}
	out := make([]partInfo, 0, len(ends))
	for _, p := range slices.Sorted(maps.Keys(ends)) {
		out = append(out, partInfo{p, starts[p], ends[p], stables[p]})
	}
	return out, nil
}

// Committed returns the group's committed offsets (the next offset to consume) for topic's
// partitions, fetched as a client would (OffsetFetch with kadm.RequireStable, so pending
// transactional commits are waited out). Partitions without a commit are absent; a group or
// topic without commits gives an empty map. It fails the test on an error.
func (c *Cluster) Committed(t testing.TB, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := opCtx(t)
	defer cancel()
	m, err := c.CommittedContext(ctx, group, topic)
	if err != nil {
		t.Fatalf("kfaketest: Committed %s/%s: %v", group, topic, err)
	}
	return m
}

// CommittedContext is Committed for programs. While a transactional commit for the group is
// pending (UNSTABLE_OFFSET_COMMIT) it retries until ctx ends.
func (c *Cluster) CommittedContext(ctx context.Context, group, topic string) (map[int32]int64, error) {
	ctx, stop, err := c.bind(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	for {
		m, err := c.committedOnce(ctx, group, topic)
		if !errors.Is(err, kerr.UnstableOffsetCommit) {
			return m, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last: %w)", context.Cause(ctx), err)
		case <-time.After(pollInterval):
		}
	}
}

func (c *Cluster) committedOnce(ctx context.Context, group, topic string) (map[int32]int64, error) {
	resps, err := c.adm.FetchOffsets(kadm.RequireStable(ctx), group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		// kfake answers a group it never saw with GROUP_ID_NOT_FOUND; Kafka answers with no
		// offsets. Both mean nothing is committed.
		return map[int32]int64{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64)
	for p, r := range resps[topic] {
		if r.Err != nil {
			return nil, fmt.Errorf("partition %d: %w", p, r.Err)
		}
		if r.At >= 0 {
			out[p] = r.At
		}
	}
	return out, nil
}

// WaitCommitted polls Committed until it equals want exactly (the same partitions, the same
// offsets) and fails the test after WaitTimeout (30s), naming the last value seen. A partition the
// group never committed is absent from Committed: leave empty partitions (high watermark 0) out
// of want.
func (c *Cluster) WaitCommitted(t testing.TB, group, topic string, want map[int32]int64) {
	t.Helper()
	ctx, cancel := opCtx(t)
	defer cancel()
	if err := c.WaitCommittedContext(ctx, group, topic, want); err != nil {
		t.Fatalf("kfaketest: WaitCommitted %s/%s: %v", group, topic, err)
	}
}

// WaitCommittedContext is WaitCommitted for programs: nil once the committed offsets equal want,
// or ctx's error wrapped with the last value (or error) seen.
func (c *Cluster) WaitCommittedContext(ctx context.Context, group, topic string, want map[int32]int64) error {
	ctx, stop, err := c.bind(ctx)
	if err != nil {
		return err
	}
	defer stop()
	var (
		last    map[int32]int64 // last value read, nil before the first
		lastErr error           // error of the last read, if it failed for another reason than ctx
	)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		m, err := c.committedOnce(ctx, group, topic)
		switch {
		case err == nil:
			if maps.Equal(m, want) {
				return nil
			}
			last, lastErr = m, nil
		case ctx.Err() == nil:
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("want %v, last seen %v, then error %w: %w", want, last, lastErr, context.Cause(ctx))
			}
			return fmt.Errorf("want %v, last seen %v: %w", want, last, context.Cause(ctx))
		case <-tick.C:
		}
	}
}
