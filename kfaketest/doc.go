// Package kfaketest runs in-process kfake clusters for tests and programs: a cluster per test,
// helpers to produce, read and inspect it, a log of every offset commit it receives, injected
// faults, and a runner that SIGKILLs and restarts a consumer running as a subprocess.
//
// It never imports the runtime package (DESIGN §1), so the runtime's own tests can use it. Its
// conformance subpackage holds the contract's scenarios and the chaos runs.
//
// # Clusters
//
// New starts a kfake cluster listening on loopback TCP and closes it in t.Cleanup; Start is the
// same for programs, which call Close. Topic creates topics at start, Brokers sets the number of
// brokers, KfakeOpts passes anything else to kfake. The cluster accepts session timeouts down to
// 100ms; ClientOpts and FastOpts give kgo clients timings that react within tens of milliseconds,
// with a SessionTimeout of 2s.
//
// Connect wraps a real cluster's brokers in the same Cluster: the helpers work through kgo and
// kadm, names get a per-run prefix (Cluster.Name) so runs sharing a cluster never meet, and the
// kfake-only features (Kfake, CommitLog, FailProduce, FailCommit, HoldProduce) panic with
// ErrKfakeOnly. Cluster.Connected tells the two apart.
//
// # Helpers
//
// Every helper that can fail has a test form, which takes a testing.TB, calls t.Helper and fails
// the test naming the last value it saw, and a program form, XContext(ctx, ...) (value, error).
// Test forms that wait give up after WaitTimeout (30s), and work in a t.Cleanup too; the helpers
// of a closed Cluster return ErrClosed at once. Produce hashes keyed records as franz-go's
// default partitioner does and sends keyless ones to Record.Partition; ProduceTo pins any record.
// ProduceTxn writes one transaction. ReadAll reads a topic to its current end, read_committed or
// not, without control records. Committed and WaitCommitted read a group's committed offsets as
// a client does; HighWatermarks reads the end of each partition.
//
// # The commit log
//
// Cluster.CommitLog records, in order, every OffsetCommit and TxnOffsetCommit request the cluster
// receives, one Commit per partition, with the group, member, instance id, generation, offset
// and leader epoch it carried. It records requests, not outcomes; Committed says what the group
// holds. It observes through kfake controls that never answer, so it coexists with the user's
// own controls and faults.
//
// # Faults
//
// FailProduce and FailCommit fail the next n matching requests with a kerr error, through
// kfake.Fault; the returned handle counts the requests it failed. HoldProduce holds every produce
// request until released, to fill a producer's buffer or run out its timeouts. For anything else,
// Kfake returns the kfake cluster.
//
// # The crash runner
//
// A crash is a crash (DESIGN §5): Spawn re-executes the test binary to run only the calling test,
// in which Child reports true and returns a ChildEnv (the brokers, the arguments, the run number,
// an InstanceID stable across restarts, and an EventLog). The child logs Start and Return around
// each record it handles; every line is synced to a file before the call returns, so after
// Process.Kill (SIGKILL) the parent knows exactly what was handled. Process.Restart starts the
// next run, Process.Events reads every run's events, Process.WaitEvents and Process.KillAfter
// wait on them with a deadline. Nothing is rebuilt, and a killed child runs no cleanup code.
// Process.Terminate stops a child gracefully instead (SIGTERM ends ChildEnv.Context), and
// Process.Note writes the parent's own markers into the child's event log, in order with the
// child's events.
package kfaketest
