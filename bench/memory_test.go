package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A memCase is one memory measurement: a consumer process reading a backlog.
type memCase struct {
	name string
	in   input
	slow bool // the handler sleeps 1ms per record instead of blocking
}

var memCases = []memCase{
	{name: "idle", in: input{topic: "mem-empty", partitions: 8}},
	{name: "blocked-250k", in: input{topic: "mem-250k", partitions: 8, records: 250_000}},
	{name: "blocked-1M", in: e2eInput},
	{name: "slow-250k", in: input{topic: "mem-250k", partitions: 8, records: 250_000}, slow: true},
	{name: "slow-1M", in: e2eInput, slow: true},
}

// BenchmarkMemory starts the consumer as a separate process (this test binary re-executed, see
// runChild) against the shared cluster, where a backlog waits: nothing (idle), 250,000 or
// 1,000,000 records of 100 bytes on 8 partitions. Both backlogs are larger than what the consumer
// may hold (its bounds, one fetch in its partitions' backlogs and one buffered in franz-go: about
// 2 × 57,000 records at FetchMaxBytes 8 MiB), so comparing them measures growth with the backlog,
// not the size of the input. The consumer runs Tracked with 8 lanes, the default bounds
// (MaxInFlightPerPartition 1024, MaxPollRecords 500) and kgo.FetchMaxBytes(8 MiB); its handler
// blocks (blocked-*: the runtime fills its bounds and pauses every partition) or
// sleeps 1ms per record (slow-*: fetching goes on as the lanes drain). The benchmark reports the
// process's peak RSS (VmHWM from /proc/<pid>/status) over the run, which must not grow with the
// backlog, and the records the runtime held at the end.
func BenchmarkMemory(b *testing.B) {
	for _, mc := range memCases {
		b.Run(mc.name, func(b *testing.B) {
			if mc.in.records == 0 {
				cluster(b)
				shared.mu.Lock()
				if _, ok := shared.inputs[mc.in.topic]; !ok {
					if err := shared.c.CreateTopicContext(context.Background(), mc.in.topic, mc.in.partitions); err != nil {
						shared.mu.Unlock()
						b.Fatal(err)
					}
					if shared.inputs == nil {
						shared.inputs = make(map[string]map[int32]int64)
					}
					shared.inputs[mc.in.topic] = map[int32]int64{}
				}
				shared.mu.Unlock()
			} else {
				produce(b, mc.in)
			}
			for range b.N {
				peak, held := runMemoryChild(b, mc)
				b.ReportMetric(float64(peak)/1024, "peak-rss-MiB")
				b.ReportMetric(float64(held), "held-records")
				b.ReportMetric(float64(mc.in.records), "backlog-records")
			}
		})
	}
}

// runMemoryChild runs one consumer process for mc and returns its peak RSS in KiB and the records
// its runtime held when it was killed.
func runMemoryChild(b *testing.B, mc memCase) (peakKiB int64, held int64) {
	b.Helper()
	c := cluster(b)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		childEnv+"=memory",
		childBrokersEnv+"="+strings.Join(c.Addrs(), ","),
		childTopicEnv+"="+mc.in.topic,
		childGroupEnv+"="+newGroup("mem"),
	)
	if mc.slow {
		cmd.Env = append(cmd.Env, childSlowEnv+"=1")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start the consumer process: %v", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	var heldN, paused, handled, lines atomic.Int64
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var h, p, n int64
			if _, err := fmt.Sscanf(sc.Text(), "held %d paused %d handled %d", &h, &p, &n); err == nil {
				heldN.Store(h)
				paused.Store(p)
				handled.Store(n)
				lines.Add(1)
			}
		}
	}()
	// Wait for the steady state: every partition paused (blocked), 5s of consumption (slow) or
	// the join (idle); then keep the process running 2s more.
	deadline := time.Now().Add(60 * time.Second)
	var steady time.Time
	for steady.IsZero() {
		if time.Now().After(deadline) {
			b.Fatalf("%s: no steady state within 60s (held %d, paused %d); stderr:\n%s", mc.name, heldN.Load(), paused.Load(), stderr.String())
		}
		if _, err := readStatus(cmd.Process.Pid); err != nil {
			b.Fatalf("%s: the consumer process exited: %v; stderr:\n%s", mc.name, err, stderr.String())
		}
		switch {
		case lines.Load() == 0: // not started yet
		case mc.in.records == 0:
			steady = time.Now()
		case !mc.slow:
			if paused.Load() == int64(mc.in.partitions) {
				steady = time.Now()
			}
		default:
			steady = time.Now().Add(5 * time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Until(steady.Add(2 * time.Second)))
	st, err := readStatus(cmd.Process.Pid)
	if err != nil {
		b.Fatalf("%s: read /proc status: %v", mc.name, err)
	}
	b.Logf("%s: backlog %d, peak RSS %.1f MiB, RSS %.1f MiB, held %d, paused %d, handled %d",
		mc.name, mc.in.records, float64(st["VmHWM"])/1024, float64(st["VmRSS"])/1024, heldN.Load(), paused.Load(), handled.Load())
	return st["VmHWM"], heldN.Load()
}

// readStatus reads the kB fields of /proc/<pid>/status (VmHWM, VmRSS, ...).
func readStatus(pid int) (map[string]int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	st := make(map[string]int64)
	for line := range strings.SplitSeq(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || !strings.HasSuffix(v, " kB") {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(v, " kB")), 10, 64); err == nil {
			st[k] = n
		}
	}
	if st["VmHWM"] == 0 {
		return nil, fmt.Errorf("no VmHWM in /proc/%d/status (a zombie?)", pid)
	}
	return st, nil
}
