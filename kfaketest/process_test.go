package kfaketest_test

import (
	"context"
	"fmt"
	goruntime "runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark-io/tidemark/kfaketest"
)

// crashConsumer is the child of TestCrashRestartResumesFromCommit: a static group member that
// commits synchronously after every record and logs around each. It runs until killed.
func crashConsumer(env kfaketest.ChildEnv) {
	cl, err := kgo.NewClient(append(env.ClientOpts(),
		kgo.ConsumerGroup(env.Args["group"]),
		kgo.ConsumeTopics(env.Args["topic"]),
		kgo.InstanceID(env.InstanceID),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	env.Log.Note("ready", strconv.Itoa(env.Run))
	for {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			panic(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			env.Log.Start(r.Topic, r.Partition, r.Offset, 1)
			if err := cl.CommitRecords(ctx, r); err != nil {
				panic(err)
			}
			env.Log.Return(r.Topic, r.Partition, r.Offset, "ack")
		})
	}
}

// A SIGKILLed consumer that is restarted with the same instance id resumes from the offset it
// last committed, as the same static member (no session timeout to wait out).
func TestCrashRestartResumesFromCommit(t *testing.T) {
	if env, ok := kfaketest.Child(); ok {
		crashConsumer(env)
		return
	}
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	vals := make([]string, 20)
	for i := range vals {
		vals[i] = fmt.Sprint(i)
	}
	c.ProduceValues(t, "in", 0, vals...)

	p := c.Spawn(t, map[string]string{"group": "g", "topic": "in"})
	p.KillAfter(t, 5)
	lastReturn := int64(-1)
	for _, e := range p.Events() {
		if e.Kind == kfaketest.EventReturn {
			lastReturn = e.Offset
		}
	}
	require.GreaterOrEqual(t, lastReturn, int64(4))

	restarted := time.Now()
	p.Restart(t)
	p.WaitEvents(t, func(evs []kfaketest.Event) bool {
		for _, e := range evs {
			if e.Run == 2 && e.Kind == kfaketest.EventStart {
				return true
			}
		}
		return false
	})
	t.Logf("run 2 delivered its first record %v after Restart", time.Since(restarted))
	p.WaitEvents(t, func(evs []kfaketest.Event) bool {
		for _, e := range evs {
			if e.Run == 2 && e.Kind == kfaketest.EventReturn && e.Offset == 19 {
				return true
			}
		}
		return false
	})
	evs := p.Events()
	firstRun2 := int64(-1)
	for _, e := range evs {
		if e.Run == 2 && e.Kind == kfaketest.EventStart {
			firstRun2 = e.Offset
			break
		}
	}
	// The commits of run 1 are those of its member; the last is where run 2 must start.
	commits := c.CommitLog().Of("g", "in", 0)
	require.NotEmpty(t, commits)
	run1Member := commits[0].Member
	lastRun1 := int64(-1)
	for _, cm := range commits {
		if cm.Member == run1Member {
			lastRun1 = cm.Offset
		}
	}
	require.NotEqual(t, run1Member, commits[len(commits)-1].Member, "run 2 committed as a new member")
	for _, cm := range commits {
		require.Equal(t, p.InstanceID(), cm.InstanceID, "both runs commit as the same static member: %+v", cm)
	}
	require.Equal(t, lastRun1, firstRun2, "run 2 starts at run 1's last commit")
	// Run 1 may have died between a commit and its Return line: then that record's commit
	// landed and run 2 starts one past its last Return.
	require.Contains(t, []int64{lastReturn + 1, lastReturn + 2}, lastRun1)

	// Every record was handled, and only the one in flight at the kill can have been handled
	// twice (if its commit did not land).
	starts := make(map[int64]int)
	for _, e := range evs {
		if e.Kind == kfaketest.EventStart {
			starts[e.Offset]++
		}
	}
	for o := range int64(20) {
		require.Positive(t, starts[o], "offset %d never started", o)
		if o != firstRun2 {
			require.Equal(t, 1, starts[o], "offset %d started twice", o)
		}
	}
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 20})
}

// A child that returns on its own exits with status 0; its notes and Args reach the parent.
func TestChildExitsAndNotes(t *testing.T) {
	if env, ok := kfaketest.Child(); ok {
		env.Log.Note("args", env.Args["x"]+"/"+strconv.Itoa(env.Run)+"/"+env.InstanceID)
		return
	}
	c := kfaketest.New(t)
	p := c.Spawn(t, map[string]string{"x": "y"})
	require.NoError(t, p.WaitExit(t))
	p.Restart(t)
	require.NoError(t, p.WaitExit(t))
	evs := p.Events()
	want := []kfaketest.Event{
		{Run: 1, Kind: kfaketest.EventNote, Note: "args", Text: "y/1/" + p.InstanceID(), Seq: 0},
		{Run: 2, Kind: kfaketest.EventNote, Note: "args", Text: "y/2/" + p.InstanceID(), Seq: 1},
	}
	require.Equal(t, want, evs)
	require.Equal(t, "TestChildExitsAndNotes-1", p.InstanceID())
}

// Spawn finds a subtest whose name needs quoting.
func TestSpawnSubtest(t *testing.T) {
	t.Run("with (parens) and spaces", func(t *testing.T) {
		if env, ok := kfaketest.Child(); ok {
			env.Log.Note("hello", "")
			return
		}
		p := kfaketest.New(t).Spawn(t, nil)
		require.NoError(t, p.WaitExit(t))
		require.Len(t, p.Events(), 1)
	})
}

// fatalRecorder is t whose Fatalf records the message and ends the calling goroutine.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	goruntime.Goexit()
}

// The other ways to fail end the goroutine too: the real t must not be failed from it.
func (f *fatalRecorder) Fatal(args ...any)                 { f.Fatalf("%s", fmt.Sprint(args...)) }
func (f *fatalRecorder) FailNow()                          { f.Fatalf("FailNow") }
func (f *fatalRecorder) Error(args ...any)                 { f.Fatal(args...) }
func (f *fatalRecorder) Errorf(format string, args ...any) { f.Fatalf(format, args...) }

// KillAfter names itself when the run exits before its returns: the failure said WaitEvents,
// which the test never called (helper-82).
func TestKillAfterNamesItselfWhenTheRunExits(t *testing.T) {
	if _, ok := kfaketest.Child(); ok {
		return // exits at once, with no return logged
	}
	p := kfaketest.New(t).Spawn(t, nil)
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.KillAfter(rec, 1)
	}()
	<-done
	require.Contains(t, rec.msg, "kfaketest: KillAfter(1 returns): run 1 exited (status 0) before the condition held; last events: []")
}
