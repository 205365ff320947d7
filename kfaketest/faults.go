package kfaketest

import (
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FailProduce fails the next n Produce requests that write to topic with err: every partition
// of topic in such a request is answered with err and nothing is appended. n counts requests, not
// records: franz-go sends in one request what it has buffered, so one hit can fail many records.
// n < 0 fails them until the handle's Remove; n == 0 or a nil err panics. A client retries retriable errors (kerr.NotEnoughReplicas,
// kerr.NotLeaderForPartition, ...), so each retry is one more request; kerr.RequestTimedOut and
// kerr.NotEnoughReplicasAfterAppend are answered after the records were appended (an ambiguous
// produce). The handle counts failed requests (Hits), waits for them (Wait) and removes the
// fault (Remove).
func (c *Cluster) FailProduce(topic string, n int, err *kerr.Error) *kfake.FaultHandle {
	c.kfakeOnly("FailProduce")
	faultErr("FailProduce", err)
	return c.k.Fault(kfake.Fault{
		Keys:  []kmsg.Key{kmsg.Produce},
		Topic: topic,
		Err:   err,
		Count: faultCount("FailProduce", n),
	})
}

// FailCommit fails the next n OffsetCommit or TxnOffsetCommit requests for group with err, as
// FailProduce does for produce requests: each partition of the request is answered with err and
// no offset is stored or staged. The CommitLog still records these requests. FailProduce,
// FailCommit and HoldProduce panic with ErrKfakeOnly on a connected cluster.
func (c *Cluster) FailCommit(group string, n int, err *kerr.Error) *kfake.FaultHandle {
	c.kfakeOnly("FailCommit")
	faultErr("FailCommit", err)
	return c.k.Fault(kfake.Fault{
		Keys:  []kmsg.Key{kmsg.OffsetCommit, kmsg.TxnOffsetCommit},
		Group: group,
		Err:   err,
		Count: faultCount("FailCommit", n),
	})
}

// faultErr panics on a nil err: the fault would answer UNKNOWN_SERVER_ERROR, not what was meant.
func faultErr(fn string, err *kerr.Error) {
	if err == nil {
		panic("kfaketest: " + fn + ": err must be a kerr error, not nil")
	}
}

func faultCount(fn string, n int) int {
	switch {
	case n == 0:
		panic("kfaketest: " + fn + ": n must not be 0 (use n < 0 for until Remove)")
	case n < 0:
		return -1
	}
	return n
}

// HoldProduce holds every Produce request the cluster receives (from any client, including
// Produce's helper) until release is called, then lets them all proceed in order. Requests that
// share a connection with a held request wait behind it. Holds may overlap: a request is held until
// every hold is released, the ones placed while it waited included. Use it to fill a producer's
// buffer or to run out a flush or queue timeout. release is idempotent and safe to call from any
// goroutine; Close calls it, so a hold never outlives the cluster.
func (c *Cluster) HoldProduce() (release func()) {
	c.kfakeOnly("HoldProduce")
	held := make(chan struct{})
	var once sync.Once
	release = func() {
		once.Do(func() {
			c.mu.Lock()
			c.holds = slices.DeleteFunc(c.holds, func(h chan struct{}) bool { return h == held })
			c.mu.Unlock()
			close(held)
		})
	}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return release
	}
	c.releases = append(c.releases, release)
	c.holds = append(c.holds, held)
	install := !c.holding
	c.holding = true
	c.mu.Unlock()
	if install {
		c.k.ControlKey(int16(kmsg.Produce), c.holdProduce)
	}
	return release
}

// holdProduce is the one control of HoldProduce, installed with the first hold and kept (it never
// handles a request, and kfake keeps a control that does not): a Produce request that arrives
// while a hold is in place sleeps, once, until none is. One control per hold would put a request
// woken by one release to sleep again in the next hold's control, and kfake
// (v0.0.0-20260918054303) races on a request that sleeps twice (bsleep.enqueue against waitQueue,
// helper-112).
func (c *Cluster) holdProduce(kmsg.Request) (kmsg.Response, error, bool) {
	c.mu.Lock()
	if c.closed || len(c.holds) == 0 { // Close released the holds already
		c.mu.Unlock()
		return nil, nil, false
	}
	c.asleep.Add(1)
	c.mu.Unlock()
	c.k.SleepControl(func() { // other connections proceed meanwhile
		for {
			c.mu.Lock()
			var next chan struct{}
			if len(c.holds) > 0 {
				next = c.holds[0]
			}
			c.mu.Unlock()
			if next == nil {
				return
			}
			<-next
		}
	})
	c.asleep.Done()
	return nil, nil, false
}
