package runtime_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// allow is an ACL letting the user do op on the named resource.
func allow(res kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
	return kfake.ACL{Resource: res, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
}

// aclCluster starts a one-broker kfake cluster that checks ACLs, with topics of one partition, the
// user svc (password pw) allowed only acls, and the superuser admin (password admin). It takes
// kfaketest.FastOpts' session timeout.
func aclCluster(t *testing.T, topics []string, acls ...kfake.ACL) *kfake.Cluster {
	t.Helper()
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics...), kfake.EnableACLs(), kfake.EnableSASL(),
		kfake.GroupMinSessionTimeout(kfaketest.SessionTimeout),
		kfake.Superuser("PLAIN", "admin", "admin"), kfake.User("PLAIN", "svc", "pw", acls...))
	require.NoError(t, err)
	t.Cleanup(k.Close)
	return k
}

// asUser returns SASL PLAIN credentials for aclCluster's user (svc) or superuser (admin).
func asUser(user string) kgo.Opt {
	pass := map[string]string{"svc": "pw", "admin": "admin"}[user]
	return kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism())
}

// aclApp is an App on k as the user svc, in group g, logging to l (nil: nowhere).
func aclApp(k *kfake.Cluster, l *slog.Logger, opts ...runtime.Option) *runtime.App {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return runtime.New(append([]runtime.Option{runtime.Brokers(k.ListenAddrs()...), runtime.DefaultGroup("g"),
		runtime.ClientOpts(asUser("svc")), runtime.Logger(l)}, opts...)...)
}

// A group that refuses its member after Start (its Read ACL deleted, then a rebalance) fails the
// App, as it fails Start: before, the App stayed Running with no partitions, logging a Warn line
// (helper-143).
func TestAGroupThatRefusesItsMemberLaterFailsTheApp(t *testing.T) {
	groupRead := allow(kmsg.ACLResourceTypeGroup, "g", kmsg.ACLOperationRead)
	k := aclCluster(t, []string{"in"}, groupRead,
		allow(kmsg.ACLResourceTypeTopic, "in", kmsg.ACLOperationDescribe),
		allow(kmsg.ACLResourceTypeTopic, "in", kmsg.ACLOperationRead))
	app := aclApp(k, nil, runtime.ClientOpts(kfaketest.FastOpts()...))
	runtime.Handle(app, runtime.Topic("in"), ack)
	start(t, app)

	admin, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), asUser("admin"))
	require.NoError(t, err)
	defer admin.Close()
	b := kadm.NewACLs().Allow("User:svc").AllowHosts().Groups("g").Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral)
	res, err := kadm.NewClient(admin).DeleteACLs(context.Background(), b)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.NoError(t, res[0].Err)
	require.Len(t, res[0].Deleted, 1, "the group's Read ACL")
	other, err := kgo.NewClient(append(kfaketest.FastOpts(), kgo.SeedBrokers(k.ListenAddrs()...), asUser("admin"),
		kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"))...) // joins g: the App's member must join again
	require.NoError(t, err)
	defer other.Close()
	select {
	case <-app.Done():
	case <-time.After(kfaketest.WaitTimeout):
		t.Fatal("the App did not fail")
	}
	state, serr := app.State()
	require.Equal(t, runtime.StateFailed, state)
	require.ErrorIs(t, serr, kerr.GroupAuthorizationFailed)
	require.ErrorContains(t, serr, `tidemark: Topic("in"): group "g": the cluster refused this member: GROUP_AUTHORIZATION_FAILED`)
}

// A Transactional subscription without an ACL for its transactional id fails the App with the
// cluster's refusal, not ErrFenced: no other instance has the id (helper-143).
func TestATransactionalIDWithoutAnACLIsNotFenced(t *testing.T) {
	k := aclCluster(t, []string{"in"},
		allow(kmsg.ACLResourceTypeGroup, "g", kmsg.ACLOperationRead),
		allow(kmsg.ACLResourceTypeTopic, "in", kmsg.ACLOperationDescribe),
		allow(kmsg.ACLResourceTypeTopic, "in", kmsg.ACLOperationRead),
		allow(kmsg.ACLResourceTypeTopic, "in", kmsg.ACLOperationWrite)) // nothing on the id
	app := aclApp(k, nil)
	runtime.Handle(app, runtime.Topic("in").Commit(runtime.Transactional("tx")), ack)
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	err := errors.Join(app.Start(ctx), app.Shutdown(ctx))
	require.ErrorIs(t, err, kerr.TransactionalIDAuthorizationFailed)
	require.NotErrorIs(t, err, runtime.ErrFenced)
	require.ErrorContains(t, err, `tidemark: Topic("in"): transactional id "tx": the cluster refused it: `)
}
