package tracker

import "sync"

// A Tracker keys Partitions by (topic, partition) for one consumer (one franz-go client). Its
// structural calls (Partition, Lookup, Remove, Moved) take a mutex; the hot path, Deliver and Complete
// on a Partition it returned, does not touch the Tracker. The zero Tracker is not usable: call [New].
type Tracker struct {
	capacity int

	mu    sync.RWMutex
	parts map[topicPartition]*Partition
}

type topicPartition struct {
	topic     string
	partition int32
}

// New returns an empty Tracker whose Partitions each hold capacity deliveries (see [NewPartition]).
// It panics if capacity < 1.
func New(capacity int) *Tracker {
	ringSize(capacity) // panics on a bad capacity now rather than at the first Partition
	return &Tracker{capacity: capacity, parts: make(map[topicPartition]*Partition)}
}

// Partition returns the Partition of (topic, partition), creating it in generation 1 if the Tracker
// has none, for callers that want the Tracker to keep a map of their partitions (the runtime makes
// its Partitions with NewPartition and keeps each pointer itself).
func (t *Tracker) Partition(topic string, partition int32) *Partition {
	k := topicPartition{topic, partition}
	t.mu.RLock()
	p := t.parts[k]
	t.mu.RUnlock()
	if p != nil {
		return p
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p = t.parts[k]; p == nil {
		p = NewPartition(t.capacity)
		t.parts[k] = p
	}
	return p
}

// Lookup returns the Partition of (topic, partition) and true, or nil and false if there is none.
func (t *Tracker) Lookup(topic string, partition int32) (*Partition, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	p, ok := t.parts[topicPartition{topic, partition}]
	return p, ok
}

// Remove forgets the Partition of (topic, partition), when the partition is revoked or lost; a later
// call to Partition creates a fresh one. Completions of deliveries taken from the removed Partition
// still go to it (their callers hold it) and no longer reach Moved. Removing an unknown partition
// does nothing.
func (t *Tracker) Remove(topic string, partition int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.parts, topicPartition{topic, partition})
}

// Moved returns, by topic and partition, the watermark of every partition whose watermark moved since
// it was last reported (see [Partition.Moved]), in the shape of kgo's MarkCommitOffsets; nil if none
// moved. Each move is reported once, across calls and goroutines.
func (t *Tracker) Moved() map[string]map[int32]Watermark {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var moved map[string]map[int32]Watermark
	for k, p := range t.parts {
		wm, ok := p.Moved()
		if !ok {
			continue
		}
		if moved == nil {
			moved = make(map[string]map[int32]Watermark)
		}
		byPartition := moved[k.topic]
		if byPartition == nil {
			byPartition = make(map[int32]Watermark)
			moved[k.topic] = byPartition
		}
		byPartition[k.partition] = wm
	}
	return moved
}
