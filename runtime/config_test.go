package runtime_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var ack = runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error { return nil })

// Start validates every option before any I/O and names the option of each problem (DESIGN §3.10).
func TestStartRejectsBadConfiguration(t *testing.T) {
	brokers := runtime.Brokers("127.0.0.1:1") // never dialled: validation fails first
	cases := []struct {
		name    string
		opts    []runtime.Option
		handle  func(*runtime.App)
		options []string // the Option of each *ConfigError, in order
	}{
		{"no brokers", nil,
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t").Group("g"), ack) },
			[]string{"Brokers"}},
		{"no subscription", []runtime.Option{brokers}, func(*runtime.App) {},
			[]string{"Handle"}},
		{"a group subscription without a group", []runtime.Option{brokers},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack) },
			[]string{`Topic("t").Group`}},
		{"an empty group beside a DefaultGroup (helper-121: it joined the default one)", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topic("t").Group(""), ack)
				runtime.Handle(a, runtime.Partitions("u", 0).Group("").Commit(runtime.Tracked), ack, runtime.RetryToSource())
				runtime.Handle(a, runtime.Topic("v").Group("").Group("h"), ack) // the last Group counts
			},
			[]string{`Topic("t").Group`, `Partitions("u", [0]).Group`}},
		{"Tracked manual partitions without a group", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Partitions("t", 0).Commit(runtime.Tracked), ack, runtime.RetryToSource())
			},
			[]string{`Partitions("t", [0]).Group`}},
		{"an unanchored pattern", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) { runtime.Handle(a, runtime.Pattern("events-.*"), ack, runtime.RetryToSource()) },
			[]string{`Pattern("events-.*")`}},
		{"an empty pattern", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) { runtime.Handle(a, runtime.Pattern(""), ack, runtime.RetryToSource()) },
			[]string{`Pattern("")`}},
		{"two subscriptions sharing a group and a topic", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topic("t"), ack)
				runtime.Handle(a, runtime.Topics("u", "t"), ack, runtime.RetryToSource())
			},
			[]string{`Topics("u", "t")`}},
		{"one pattern twice in a group (no topic need match yet)", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Pattern("^ev-"), ack, runtime.RetryToSource())
				runtime.HandleBatch(a, runtime.Pattern("^ev-").Group("g"), 10, runtime.BatchAll(func(context.Context, []*runtime.Delivery) error { return nil }), runtime.RetryToSource())
				runtime.Handle(a, runtime.Pattern("^ev-").Group("other"), ack, runtime.RetryToSource())
			},
			[]string{`Pattern("^ev-").Group("g")`}},
		{"a manual subscription using a group subscription's group", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topic("t"), ack)
				runtime.Handle(a, runtime.Partitions("u", 0).Group("g"), ack, runtime.RetryToSource())
			},
			[]string{`Partitions("u", [0]).Group`}},
		{"a two-topic subscription without a retry address", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topics("t", "u"), ack, runtime.MaxAttempts(3)) },
			[]string{`Topics("t", "u"): RetryTo`}},
		{"a pattern without a retry address", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) { runtime.Handle(a, runtime.Pattern("^t"), ack) },
			[]string{`Pattern("^t"): RetryTo`}},
		{"RetryTo on manual partitions", []runtime.Option{brokers},
			func(a *runtime.App) { runtime.Handle(a, runtime.Partitions("t", 0), ack, runtime.RetryTo("r")) },
			[]string{`Partitions("t", [0]): RetryTo`}},
		{"producer options a Transactional session refuses, in its Config (helper-117)", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topic("t").Commit(runtime.Transactional("id")).Config(kgo.DefaultProduceTopic("d"), kgo.DefaultProduceTopicAlways()), ack)
				runtime.Handle(a, runtime.Topic("u").Commit(runtime.Transactional("id2")).Config(kgo.ManualFlushing()), ack)
				runtime.Handle(a, runtime.Topic("v").Commit(runtime.Tracked).Config(kgo.ManualFlushing()), ack) // it does not produce
			},
			[]string{`Topic("t").Config`, `Topic("u").Config`}},
		{"a RetryTo topic another subscription of the group reads", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topic("t"), ack, runtime.RetryTo("r"))
				runtime.Handle(a, runtime.Topic("r"), ack)
			},
			[]string{`Topic("r")`}},
		{"MaxAttempts(0)", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack, runtime.MaxAttempts(0)) },
			[]string{`Topic("t"): MaxAttempts`}},
		{"a batch size of 0", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) { runtime.HandleBatch(a, runtime.Topic("t"), 0, runtime.BatchAll(nil)) },
			[]string{`Topic("t"): HandleBatch`}},
		{"two Transactional subscriptions sharing an id", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topic("t").Commit(runtime.Transactional("id")), ack)
				runtime.Handle(a, runtime.Topic("u").Commit(runtime.Transactional("id")), ack)
			},
			[]string{`Topic("u").Commit`}},
		{"zero workers", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack, runtime.Workers(0)) },
			[]string{`Topic("t"): Workers`}},
		{"zero in flight per partition", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack, runtime.MaxInFlightPerPartition(0)) },
			[]string{`Topic("t"): MaxInFlightPerPartition`}},
		{"a nil handler", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), nil) },
			[]string{`Topic("t"): Handle`}},
		{"nil functions in handlers of every kind (they would panic on the first record)", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topic("t"), runtime.HandlerFunc(nil))
				runtime.Handle(a, runtime.Topic("u"), runtime.JSON[int](nil))
				runtime.Handle(a, runtime.Topic("v"), runtime.JSONReply[int, int](nil), runtime.Reply("out"))
				runtime.HandleBatch(a, runtime.Topic("w"), 10, runtime.BatchHandlerFunc(nil))
				runtime.HandleBatch(a, runtime.Topic("x"), 10, runtime.JSONBatch[int](nil))
				runtime.HandleBatch(a, runtime.Topic("y"), 10, runtime.BatchAll(nil))
			},
			[]string{`Topic("t"): Handle`, `Topic("u"): Handle`, `Topic("v"): Handle`, `Topic("w"): HandleBatch`,
				`Topic("x"): HandleBatch`, `Topic("y"): HandleBatch`}},
		{"idempotent writes turned off (they carry acks=all)", []runtime.Option{brokers, runtime.DefaultGroup("g"),
			runtime.ProducerOpts(kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck()))},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack) },
			[]string{"ProducerOpts"}},
		{"idempotent writes turned off through ClientOpts", []runtime.Option{brokers, runtime.DefaultGroup("g"),
			runtime.ClientOpts(kgo.DisableIdempotentWrite())},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack) },
			[]string{"ProducerOpts"}},
		{"a transactional id for the App's producer", []runtime.Option{brokers, runtime.DefaultGroup("g"),
			runtime.ProducerOpts(kgo.TransactionalID("x"))},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack) },
			[]string{"ProducerOpts"}},
		{"a transactional id through ClientOpts", []runtime.Option{brokers, runtime.DefaultGroup("g"),
			runtime.ClientOpts(kgo.TransactionalID("x"))},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack) },
			[]string{"ProducerOpts"}},
		{"a group option among the producer's", []runtime.Option{brokers, runtime.DefaultGroup("g"),
			runtime.ProducerOpts(kgo.ProducerLinger(0), kgo.ConsumerGroup("other"))},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack) },
			[]string{"ProducerOpts"}},
		{"every producer problem at once", []runtime.Option{brokers, runtime.DefaultGroup("g"),
			runtime.ClientOpts(kgo.TransactionalID("x")),
			runtime.ProducerOpts(kgo.ConsumerGroup("other"), kgo.FetchMaxWait(time.Second))},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack) },
			[]string{"ProducerOpts", "ProducerOpts", "ProducerOpts"}},
		{"franz-go options it accepts that Tidemark cannot take back (helper-128)", []runtime.Option{brokers, runtime.DefaultGroup("g"),
			runtime.ClientOpts(kgo.ConsumeRegex(), kgo.InstanceID("pod-0"))},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topic("t").Commit(runtime.Tracked).Config(kgo.TransactionalID("x")), ack)
				runtime.Handle(a, runtime.Topic("u"), ack) // the App's options are reported once
				runtime.Handle(a, runtime.Pattern("^v-"), ack, runtime.RetryToSource())
				runtime.Handle(a, runtime.Topic("w").Commit(runtime.Transactional("w")).Config(kgo.TransactionalID("y")), ack)
			},
			[]string{"ClientOpts", "ClientOpts", `Topic("t").Config`}},
		{"owned options beside a TLS config, which a probe's own Dialer would clash with (helper-130)", []runtime.Option{brokers, runtime.DefaultGroup("g"),
			runtime.ClientOpts(kgo.DialTLSConfig(&tls.Config{}), kgo.InstanceID("pod-0"))},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack) },
			[]string{"ClientOpts"}},
		{"owned options in a Config valid only with ClientOpts (helper-130)", []runtime.Option{brokers, runtime.DefaultGroup("g"),
			runtime.ClientOpts(kgo.BrokerMaxReadBytes(200 << 20))},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topic("t").Commit(runtime.Tracked).Config(kgo.FetchMaxBytes(150<<20), kgo.TransactionalID("x")), ack)
			},
			[]string{`Topic("t").Config`}},
		{"owned options beside options franz-go refuses without Tidemark's own (helper-131)", []runtime.Option{brokers, runtime.DefaultGroup("g"),
			runtime.ClientOpts(kgo.ConsumeStartOffset(kgo.RewindOffset(0)), kgo.ConsumeRegex())},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack) },
			[]string{"ClientOpts"}},
		{"a TransactionalID beside ConsumeExcludeTopics in a Pattern's Config (helper-131)", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Pattern("^ev").Commit(runtime.Tracked).
					Config(kgo.ConsumeExcludeTopics("^ev-skip$"), kgo.TransactionalID("x")), ack, runtime.RetryToSource())
			},
			[]string{`Pattern("^ev").Config`}},
		{"kgo.InstanceID beside ConsumeExcludeTopics, every subscription a Pattern (helper-131)", []runtime.Option{brokers, runtime.DefaultGroup("g"),
			runtime.ClientOpts(kgo.ConsumeExcludeTopics("^skip$"), kgo.InstanceID("pod-0"))},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Pattern("^ev"), ack, runtime.RetryToSource())
				runtime.Handle(a, runtime.Pattern("^lg"), ack, runtime.RetryToSource())
			},
			[]string{"ClientOpts"}},
		{"kgo.InstanceID in ClientOpts valid only with the Config: named with both", []runtime.Option{brokers, runtime.DefaultGroup("g"),
			runtime.ClientOpts(kgo.FetchMaxBytes(200<<20), kgo.InstanceID("pod-0"))},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topic("t").Config(kgo.BrokerMaxReadBytes(300<<20)), ack)
			},
			[]string{`Topic("t").Config`}},
		{"kgo.InstanceID in a Config without runtime.InstanceID", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t").Config(kgo.InstanceID("pod-0")), ack) },
			[]string{`Topic("t").Config`}},
		{"producer options franz-go rejects", []runtime.Option{brokers, runtime.DefaultGroup("g"),
			runtime.ProducerOpts(kgo.RequiredAcks(kgo.LeaderAck()))},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack) },
			[]string{"ProducerOpts"}},
		{"zero MaxPollRecords", []runtime.Option{brokers, runtime.DefaultGroup("g"), runtime.MaxPollRecords(0)},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack) },
			[]string{"MaxPollRecords"}},
		{"empty topic names (DeadLetter(os.Getenv(...)) with the variable unset)", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topic("t"), ack, runtime.DeadLetter(""), runtime.RetryTo(""), runtime.DeadLetter(""))
			},
			[]string{`Topic("t"): DeadLetter`, `Topic("t"): RetryTo`}},
		{"an empty topic name that a later option overrides, and the reverse", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topic("t"), ack, runtime.DeadLetter(""), runtime.DeadLetter("d"),
					runtime.RetryTo(""), runtime.RetryToSource(), runtime.Workers(0))
				runtime.Handle(a, runtime.Topic("u"), ack, runtime.DeadLetter("d"), runtime.DeadLetter(""))
			},
			[]string{`Topic("t"): Workers`, `Topic("u"): DeadLetter`}},
		{"negative Transactional durations on a Tracked subscription", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topic("t").Commit(runtime.Tracked), ack, runtime.CommitInterval(-time.Second), runtime.WindowTimeout(0))
			},
			[]string{`Topic("t"): CommitInterval`, `Topic("t"): WindowTimeout`}},
		{"an empty broker address (Brokers(os.Getenv(...)) with the variable unset)", []runtime.Option{runtime.Brokers(""), runtime.DefaultGroup("g")},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack) },
			[]string{"Brokers"}},
		{"a nil observer", []runtime.Option{brokers, runtime.DefaultGroup("g"), runtime.Observe(nil)},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack) },
			[]string{"Observe"}},
		{"an unknown panic policy and start offset", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topic("t").Start(runtime.StartOffset(9)), ack, runtime.OnPanic(runtime.PanicPolicy(9)))
			},
			[]string{`Topic("t"): OnPanic`, `Topic("t").Start`}},
		{"a dead-letter topic the subscription reads (every dead letter would be read again)", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topics("t", "u"), ack, runtime.DeadLetter("u"), runtime.RetryToSource())
			},
			[]string{`Topics("t", "u"): DeadLetter`}},
		{"one topic for retry copies and dead letters", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topic("t"), ack, runtime.DeadLetter("r"), runtime.RetryTo("r"))
			},
			[]string{`Topic("t"): DeadLetter`}},
		{"a manual partition named twice, and a negative one", []runtime.Option{brokers},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Partitions("t", 0, 0, -1), ack, runtime.RetryToSource())
			},
			[]string{`Partitions("t", [0 0 -1])`, `Partitions("t", [0 0 -1])`}},
		{"sizes past their bounds (a typo of a few zeros)", []runtime.Option{brokers, runtime.DefaultGroup("g"), runtime.MaxPollRecords(1 << 21)},
			func(a *runtime.App) {
				runtime.Handle(a, runtime.Topic("t"), ack, runtime.Workers(1<<17), runtime.MaxInFlightPerPartition(1<<21))
				runtime.HandleBatch(a, runtime.Topic("u"), 1<<21, runtime.BatchAll(nil))
			},
			[]string{"MaxPollRecords", `Topic("t"): Workers`, `Topic("t"): MaxInFlightPerPartition`, `Topic("u"): HandleBatch`}},
		{"a reply topic the subscription reads (its topic, its retry topic)", []runtime.Option{brokers, runtime.DefaultGroup("g")},
			func(a *runtime.App) {
				echo := runtime.JSONReply(func(_ context.Context, v struct{}) (struct{}, error) { return v, nil })
				runtime.Handle(a, runtime.Topic("t"), echo, runtime.Reply("t"))
				runtime.Handle(a, runtime.Topic("u"), echo, runtime.Reply("u.retry"), runtime.RetryTo("u.retry"))
			},
			[]string{`Topic("t"): Reply`, `Topic("u"): Reply`}},
		{"every problem at once", []runtime.Option{runtime.MaxPollRecords(-1)},
			func(a *runtime.App) { runtime.Handle(a, runtime.Topic("t"), ack, runtime.Workers(-2)) },
			[]string{"Brokers", "MaxPollRecords", `Topic("t"): Workers`, `Topic("t").Group`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			app := runtime.New(append([]runtime.Option{runtime.Logger(testLogger())}, tc.opts...)...)
			tc.handle(app)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := app.Start(ctx)
			require.Error(t, err)
			var got []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var ce *runtime.ConfigError
				require.ErrorAs(t, e, &ce)
				got = append(got, ce.Option)
				require.Contains(t, e.Error(), "tidemark: "+ce.Option+": ")
			}
			require.Equal(t, tc.options, got)
			state, reason := app.State()
			require.Equal(t, runtime.StateFailed, state)
			require.Equal(t, err, reason)
			select {
			case <-app.Done(): // stopped, as after any failed start: a program waiting on Done ends
			default:
				t.Fatal("Done is not closed after a Start that failed validation")
			}
			require.ErrorIs(t, app.Start(ctx), runtime.ErrStarted, "an App starts once")
			require.NoError(t, app.Shutdown(ctx))
		})
	}
}

// A topic one subscription reads and another's RetryTo names, in one group: the error says which
// of them has it as its RetryTo topic, in either order of registration (helper-115: the text
// named only the topic).
func TestASharedRetryToTopicIsNamedAsOne(t *testing.T) {
	for _, tc := range []struct {
		name   string
		handle func(a *runtime.App)
		want   string
	}{
		{"RetryTo first", func(a *runtime.App) {
			runtime.Handle(a, runtime.Topic("t"), ack, runtime.RetryTo("r"))
			runtime.Handle(a, runtime.Topic("r"), ack)
		}, `tidemark: Topic("r"): shares group "g" and topic "r" with Topic("t") (as its RetryTo topic)`},
		{"RetryTo second", func(a *runtime.App) {
			runtime.Handle(a, runtime.Topic("r"), ack)
			runtime.Handle(a, runtime.Topic("t"), ack, runtime.RetryTo("r"))
		}, `tidemark: Topic("t"): shares group "g" and topic "r" (its RetryTo topic) with Topic("r")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := runtime.New(runtime.Logger(testLogger()), runtime.Brokers("127.0.0.1:1"), runtime.DefaultGroup("g"))
			tc.handle(app)
			err := app.Start(t.Context())
			var ce *runtime.ConfigError
			require.ErrorAs(t, err, &ce)
			require.EqualError(t, err, tc.want)
		})
	}
}

// A topic named twice in one subscription is reported as such, once, not as a subscription that
// shares its group and topic with itself; a pattern that is neither anchored nor a regular
// expression gets both problems.
func TestStartNamesATopicNamedTwiceAndABadPattern(t *testing.T) {
	app := runtime.New(runtime.Brokers("127.0.0.1:1"), runtime.DefaultGroup("g"))
	runtime.Handle(app, runtime.Topics("t", "u", "t", "t"), ack, runtime.RetryToSource())
	runtime.Handle(app, runtime.Pattern("(("), ack, runtime.RetryToSource())
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	err := app.Start(ctx)
	require.EqualError(t, err, `tidemark: Topics("t", "u", "t", "t"): topic "t" is named twice`+"\n"+
		`tidemark: Pattern("(("): a pattern must be anchored: it must start with "^"`+"\n"+
		"tidemark: Pattern(\"((\"): invalid regular expression: error parsing regexp: missing closing ): `((`")
	require.NoError(t, app.Shutdown(ctx))
}

// A nil option (a conditional option left unset in a slice) is a problem Start reports with the
// others, naming where it was given and its position, not a nil-pointer panic in New, Handle or
// franz-go (helper-64).
func TestStartReportsNilOptions(t *testing.T) {
	var none runtime.Option
	var noHandleOpt runtime.HandleOption
	var noKgo kgo.Opt
	app := runtime.New(runtime.Brokers("127.0.0.1:1"), none, runtime.DefaultGroup("g"),
		runtime.ClientOpts(kgo.ClientID("c"), noKgo), runtime.ProducerOpts(noKgo))
	runtime.Handle(app, runtime.Topic("t").Config(kgo.FetchMaxWait(time.Second)).Config(noKgo), ack,
		runtime.Workers(2), noHandleOpt)
	runtime.HandleBatch(app, runtime.Topic("u"), 10,
		runtime.BatchAll(func(context.Context, []*runtime.Delivery) error { return nil }), noHandleOpt)
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	err := app.Start(ctx)
	require.EqualError(t, err, "tidemark: New: option 2 is nil\n"+
		"tidemark: ClientOpts: option 2 is nil\n"+
		"tidemark: ProducerOpts: option 1 is nil\n"+
		`tidemark: Topic("t"): Handle: option 2 is nil`+"\n"+
		`tidemark: Topic("t").Config: option 2 is nil`+"\n"+
		`tidemark: Topic("u"): HandleBatch: option 1 is nil`)
	var ce *runtime.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "New", ce.Option)
	require.NoError(t, app.Shutdown(ctx))
}

// franz-go options a consumer's client refuses fail Start with the other problems, each a
// *ConfigError naming where the option was given, once (helper-102: kgo.ConsumeExcludeTopics in
// ClientOpts with a Topic subscription failed Start alone, after every other problem was fixed,
// with franz-go's bare error); so does a broker address franz-go cannot parse. franz-go names one
// problem of a client: Topic("u")'s own (Config), of the two it has. A problem of the App's options
// is reported once, whichever clients it fails; a subscription's own, for each (helper-104: one
// with the same text as another's, or as ProducerOpts', was not reported).
func TestStartReportsClientOptionsFranzGoRefuses(t *testing.T) {
	app := runtime.New(runtime.Brokers("[::1"), runtime.DefaultGroup("g"),
		runtime.ClientOpts(kgo.ConsumeExcludeTopics("^x$")))
	runtime.Handle(app, runtime.Pattern("^p"), ack, runtime.RetryToSource()) // excludes with its regex: fine
	runtime.Handle(app, runtime.Topic("t"), ack, runtime.Workers(0))
	runtime.Handle(app, runtime.Topic("u").Config(kgo.SessionTimeout(time.Millisecond)), ack)
	runtime.Handle(app, runtime.Pattern("^v").Config(kgo.SessionTimeout(time.Millisecond)), ack, runtime.RetryToSource())
	runtime.Handle(app, runtime.Topic("w").Config(kgo.FetchMaxWait(time.Millisecond)), ack)
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	err := app.Start(ctx)
	require.EqualError(t, err, "tidemark: Brokers: invalid addr: [::1\n"+
		`tidemark: Topic("t"): Workers: need 1 to 65536 lanes, got 0`+"\n"+
		`tidemark: ClientOpts: Topic("t"): invalid use of ConsumeExcludeTopics when not using ConsumeRegex`+"\n"+
		`tidemark: Topic("u").Config: session timeout 1ms is less than allowed 100ms`+"\n"+
		`tidemark: Pattern("^v").Config: session timeout 1ms is less than allowed 100ms`+"\n"+
		`tidemark: Topic("w").Config: max fetch wait 1ms is less than allowed 10ms`)
	var ce *runtime.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "Brokers", ce.Option)
	state, _ := app.State()
	require.Equal(t, runtime.StateFailed, state)
	require.NoError(t, app.Shutdown(ctx))

	// A Transactional subscription's client takes ProducerOpts too, with its transactional id.
	app = runtime.New(runtime.Brokers("127.0.0.1:1"), runtime.DefaultGroup("g"),
		runtime.ProducerOpts(kgo.DisableIdempotentWrite()))
	runtime.Handle(app, runtime.Topic("t").Commit(runtime.Transactional("id")), ack)
	require.EqualError(t, app.Start(ctx), "tidemark: ProducerOpts: kgo.DisableIdempotentWrite: Tidemark settles records on "+
		"acknowledged writes, which need idempotent writes with acks=all\n"+
		`tidemark: ProducerOpts: Topic("t"): cannot both disable idempotent writes and use transactional IDs`)
	require.NoError(t, app.Shutdown(ctx))

	// A transactional id past franz-go's bound is the subscription's Commit; the producer's
	// problem and a subscription's of the same text are both reported.
	app = runtime.New(runtime.Brokers("127.0.0.1:1"), runtime.DefaultGroup("g"),
		runtime.ProducerOpts(kgo.ProducerLinger(2*time.Minute)))
	runtime.Handle(app, runtime.Topic("t").Commit(runtime.Transactional(strings.Repeat("x", 16383))), ack)
	runtime.Handle(app, runtime.Topic("u").Config(kgo.ProducerLinger(2*time.Minute)), ack)
	require.EqualError(t, app.Start(ctx), "tidemark: ProducerOpts: linger 2m0s is larger than allowed 1m0s\n"+
		`tidemark: Topic("t").Commit: transactional id length 16383 is larger than max allowed 16382`+"\n"+
		`tidemark: Topic("u").Config: linger 2m0s is larger than allowed 1m0s`)
	require.NoError(t, app.Shutdown(ctx))
}

// Two registrations on one topic, in two groups: each problem names the registration with its
// group, so that the two can be told apart.
func TestStartNamesTheGroupOfASharedSubscription(t *testing.T) {
	app := runtime.New(runtime.Brokers("127.0.0.1:1"))
	runtime.Handle(app, runtime.Topic("in").Group("billing"), ack, runtime.Workers(0))
	runtime.Handle(app, runtime.Topic("in").Group("shipping"), ack)
	runtime.HandleBatch(app, runtime.Topic("in").Group("audit"), 0, runtime.BatchAll(func(context.Context, []*runtime.Delivery) error { return nil }))
	runtime.Handle(app, runtime.Topic("other"), ack, runtime.Workers(0))
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	err := app.Start(ctx)
	var got []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *runtime.ConfigError
		require.ErrorAs(t, e, &ce)
		got = append(got, ce.Option)
	}
	require.Equal(t, []string{`Topic("in").Group("billing"): Workers`, `Topic("in").Group("audit"): HandleBatch`,
		`Topic("other"): Workers`, `Topic("other").Group`}, got)
	require.NoError(t, app.Shutdown(ctx))
}

// The outcome constructors keep the user's cause visible to errors.Is; without one, the cause
// reported to the Observer and the log is the runtime's own, prefixed as every Tidemark error.
func TestOutcomesWrapTheirCause(t *testing.T) {
	cause := errors.New("bank down")
	require.ErrorIs(t, runtime.Drop(cause), cause)
	require.ErrorIs(t, runtime.Retry(cause), cause)
	require.EqualError(t, runtime.Drop(cause), "tidemark: drop: bank down")
	require.EqualError(t, runtime.Retry(cause), "tidemark: retry: bank down")
	require.EqualError(t, runtime.Drop(nil), "tidemark: dropped")
	require.EqualError(t, runtime.Retry(nil), "tidemark: retry requested")
	require.EqualError(t, runtime.RetryAfter(time.Second, nil), "tidemark: retry requested")

	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "a", "b")
	obs := &observer{}
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	var calls atomic.Int32
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			if string(d.Record().Value) == "a" {
				return runtime.Drop(nil)
			}
			if calls.Add(1) == 1 {
				return runtime.Retry(nil)
			}
			return nil
		}), fastBackoff)
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2})
	stop(t, app)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	var got []string
	for _, e := range obs.settled {
		got = append(got, fmt.Sprintf("%d %v %v", e.Offset, e.Outcome, e.Err))
	}
	require.Equal(t, []string{"0 drop tidemark: dropped", "1 retry tidemark: retry requested", "1 ack <nil>"}, got)
}

// A topic the cluster refuses to describe (no Describe ACL) fails Start with a ConfigError naming
// the option and the topic, with the cluster's error, not called missing: kadm fails the whole
// listing with it, naming no topic (helper-138).
func TestStartNamesATopicTheClusterRefusesToDescribe(t *testing.T) {
	k := aclCluster(t, []string{"in", "secret"}, // nothing on "secret"
		allow(kmsg.ACLResourceTypeTopic, "in", kmsg.ACLOperationDescribe))
	app := aclApp(k, nil)
	runtime.Handle(app, runtime.Topic("in"), ack, runtime.DeadLetter("secret"))
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	err := app.Start(ctx)
	require.EqualError(t, err, `tidemark: Topic("in"): DeadLetter: topic "secret": `+kerr.TopicAuthorizationFailed.Error())
	require.ErrorIs(t, err, kerr.TopicAuthorizationFailed)
	require.NotErrorIs(t, err, kerr.UnknownTopicOrPartition)
	var ce *runtime.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, `Topic("in"): DeadLetter`, ce.Option)
	require.NoError(t, app.Shutdown(ctx))
}

// A member the cluster refuses to let into its group (no Read ACL on the group) fails Start at once
// with the refusal: before, Start waited out its ctx and said only "no assignment" (helper-141).
func TestStartFailsWhenTheGroupRefusesTheMember(t *testing.T) {
	k := aclCluster(t, []string{"in"}, // the topic's Describe and Read, nothing on the group
		allow(kmsg.ACLResourceTypeTopic, "in", kmsg.ACLOperationDescribe),
		allow(kmsg.ACLResourceTypeTopic, "in", kmsg.ACLOperationRead))
	app := aclApp(k, nil)
	runtime.Handle(app, runtime.Topic("in"), ack)
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	err := app.Start(ctx)
	require.ErrorIs(t, err, kerr.GroupAuthorizationFailed)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "not the ctx's end")
	require.ErrorContains(t, err, `tidemark: start: Topic("in"): group "g": the cluster refused this member: GROUP_AUTHORIZATION_FAILED`)
	state, serr := app.State()
	require.Equal(t, runtime.StateFailed, state)
	require.Equal(t, err, serr)
	require.NoError(t, app.Shutdown(ctx))
}

// Start's checks of the cluster name a subscription registered twice with its group, as its
// validation does (helper-141: two identical lines for two groups' missing dead-letter topic).
func TestStartNamesTheGroupOfASharedSubscriptionsMissingTopic(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	app := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
	runtime.Handle(app, runtime.Topic("in"), ack, runtime.DeadLetter("nosuch"))
	runtime.Handle(app, runtime.Topic("in").Group("g2"), ack, runtime.DeadLetter("nosuch"))
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	err := app.Start(ctx)
	require.EqualError(t, err, `tidemark: Topic("in"): DeadLetter: topic "nosuch" does not exist`+"\n"+
		`tidemark: Topic("in").Group("g2"): DeadLetter: topic "nosuch" does not exist`)
}

// Two manual subscriptions committing one partition into one group are refused: each would commit
// its own offset for it, and the group's committed offset would go back and forth (helper-142: 200,
// then 63). Different partitions of the topic in one group, or the same partition without a
// group, are fine.
func TestStartRefusesTwoManualSubscriptionsCommittingOnePartition(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("a", 3))
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Partitions("a", 0, 1).Group("pg"), ack, runtime.RetryToSource())
	runtime.Handle(app, runtime.Partitions("a", 2, 1).Group("pg"), ack, runtime.RetryToSource())
	runtime.Handle(app, runtime.Partitions("a", 2).Group("other"), ack, runtime.RetryToSource())
	runtime.Handle(app, runtime.Partitions("a", 0), ack, runtime.RetryToSource())
	runtime.Handle(app, runtime.Partitions("a", 0), ack, runtime.RetryToSource())
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	err := app.Start(ctx)
	require.EqualError(t, err, `tidemark: Partitions("a", [2 1]): shares group "pg" and partition 1 of topic "a" with Partitions("a", [0 1])`)

	ok := runtime.New(appOpts(c)...)
	runtime.Handle(ok, runtime.Partitions("a", 0).Group("pg"), ack, runtime.RetryToSource())
	runtime.Handle(ok, runtime.Partitions("a", 1).Group("pg"), ack, runtime.RetryToSource())
	start(t, ok)
}

// A subscribed or Reply topic that does not exist fails Start at once, naming it, and Handle after
// Start panics instead of being ignored.
func TestStartChecksTopicsAndHandleAfterStartPanics(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	app := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
	runtime.Handle(app, runtime.Topic("nope"), ack)
	runtime.Handle(app, runtime.Topic("in"),
		runtime.JSONReply(func(context.Context, struct{}) (struct{}, error) { return struct{}{}, nil }), runtime.Reply("nope.done"))
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	err := app.Start(ctx)
	require.ErrorContains(t, err, `tidemark: Topic("nope"): topic "nope" does not exist`)
	require.ErrorContains(t, err, `tidemark: Topic("in"): Reply: topic "nope.done" does not exist`)
	require.ErrorIs(t, err, kerr.UnknownTopicOrPartition) // helper-136: only errors.As found it
	var ce *runtime.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, `Topic("nope")`, ce.Option)
	require.PanicsWithValue(t, `tidemark: Handle(Topic("in")) after Start: register every handler before Start`,
		func() { runtime.Handle(app, runtime.Topic("in"), ack) })
	require.PanicsWithValue(t, `tidemark: HandleBatch(Topic("in")) after Start: register every handler before Start`,
		func() {
			runtime.HandleBatch(app, runtime.Topic("in"), 10, runtime.BatchAll(func(context.Context, []*runtime.Delivery) error { return nil }))
		})
}

// A Publish before a Start that fails validation leaves no producer goroutine behind (goleak in
// TestMain checks).
func TestFailedStartClosesAProducerOpenedByPublish(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("out", 1))
	app := runtime.New(appOpts(c)...)
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	require.NoError(t, app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("early")}))
	require.Error(t, app.Start(ctx), "no subscription")
	require.ErrorIs(t, app.Publish(ctx, &kgo.Record{Topic: "out"}), runtime.ErrClosed)
}

// An App shut down before it started stays stopped: Start and Run say it was closed (not that it
// started), Handle on a nil App says what is nil.
func TestStartAfterShutdownSaysClosed(t *testing.T) {
	app := runtime.New(runtime.Brokers("127.0.0.1:1"), runtime.Logger(testLogger()))
	runtime.Handle(app, runtime.Topic("in").Group("g"), ack)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, app.Shutdown(ctx))
	state, _ := app.State()
	require.Equal(t, runtime.StateStopped, state)
	require.ErrorIs(t, app.Start(ctx), runtime.ErrClosed)
	require.ErrorIs(t, app.Run(ctx), runtime.ErrClosed)
	require.PanicsWithValue(t, `tidemark: Handle(Topic("in")) on a nil App: make it with New`,
		func() { runtime.Handle(nil, runtime.Topic("in"), ack) })
	require.PanicsWithValue(t, `tidemark: HandleBatch(Topic("in")) on a nil App: make it with New`,
		func() {
			runtime.HandleBatch(nil, runtime.Topic("in"), 10, runtime.BatchAll(func(context.Context, []*runtime.Delivery) error { return nil }))
		})
}

// A Shutdown while Start waits for its group ends Start (ErrClosed) and stops what Start had
// started: the App ends Stopped, Done is closed, nothing is handled, and no goroutine is left
// (goleak in TestMain). Before, Shutdown stopped none of it and Start went on to Running.
func TestShutdownDuringStartStopsWhatStartStarted(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "a")
	join := c.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Group: "g",
		Err: kerr.CoordinatorLoadInProgress, Count: -1}) // retried: Start waits for the group
	defer join.Remove()
	var s seen
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		s.handler())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- app.Start(ctx) }()
	eventually(t, func() bool { return join.Hits() > 0 }, "Start never tried to join")
	require.NoError(t, app.Shutdown(ctx))
	require.ErrorIs(t, <-started, runtime.ErrClosed)
	state, reason := app.State()
	require.Equal(t, runtime.StateStopped, state)
	require.NoError(t, reason)
	select {
	case <-app.Done():
	default:
		t.Fatal("Done is not closed after Shutdown returned")
	}
	require.Zero(t, s.len())
	err := app.Start(ctx)
	require.ErrorIs(t, err, runtime.ErrStarted)
	require.EqualError(t, err, "tidemark: app already started, and it has stopped (Stopped): an App starts once, make a new one")
}

// Run ended by a Shutdown during its Start returns ErrClosed only once that Shutdown has stopped
// everything: Done is closed by then.
func TestRunEndedByShutdownDuringStartReturnsAfterIt(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	join := c.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Group: "g",
		Err: kerr.CoordinatorLoadInProgress, Count: -1})
	defer join.Remove()
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked), ack)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- app.Run(ctx) }()
	eventually(t, func() bool { return join.Hits() > 0 }, "Run never tried to join")
	go func() { _ = app.Shutdown(ctx) }()
	require.ErrorIs(t, <-ran, runtime.ErrClosed)
	select {
	case <-app.Done():
	default:
		t.Fatal("Run returned before the Shutdown had finished")
	}
}

// Run whose ctx ends while Start waits for the group (a SIGTERM during start-up) returns Start's
// error, which wraps the ctx's, once everything has stopped: the App is Failed and committed nothing.
func TestRunWhoseCtxEndsDuringStartReturnsStartsError(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "a")
	join := c.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Group: "g",
		Err: kerr.CoordinatorLoadInProgress, Count: -1})
	defer join.Remove()
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked), ack)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- app.Run(ctx) }()
	eventually(t, func() bool { return join.Hits() > 0 }, "Run never tried to join")
	cancel()
	var err error
	select {
	case err = <-ran:
	case <-time.After(kfaketest.WaitTimeout):
		t.Fatal("Run did not return")
	}
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "tidemark: start: ")
	st, why := app.State()
	require.Equal(t, runtime.StateFailed, st)
	require.ErrorIs(t, why, context.Canceled)
	select {
	case <-app.Done():
	default:
		t.Fatal("Run returned before the App had stopped")
	}
	require.Empty(t, c.Committed(t, "g", "in"))
}

// tidemarkGoroutines returns the stacks of the live goroutines running the runtime package's code,
// the tests' excepted.
func tidemarkGoroutines() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:goruntime.Stack(buf, true)]
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if _, top, _ := strings.Cut(g, "\n"); strings.HasPrefix(top, "runtime.goexit1(") {
			continue // its function has returned; the goroutine is exiting
		}
		if strings.Contains(g, "tidemark/runtime.") && !strings.Contains(g, "runtime_test.") {
			out = append(out, g)
		}
	}
	return out
}

// A Start that failed (a missing topic) has stopped everything it began when it returns, the
// supervisor included: Done is closed and no goroutine of the App is left; a later Shutdown
// returns its result at once. Run after such a Start likewise returns only once all of it has
// returned (the supervisor waits for Start, then finds the shutdown done).
func TestAFailedStartLeavesNothingRunning(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("other", 1))
	for _, via := range []string{"Start", "Run"} {
		for i := range 15 {
			app := runtime.New(appOpts(c)...)
			runtime.Handle(app, runtime.Topic("missing").Group("g"), ack)
			ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
			run := app.Start
			if via == "Run" {
				run = app.Run
			}
			require.ErrorContains(t, run(ctx), `topic "missing" does not exist`)
			select {
			case <-app.Done():
			default:
				t.Fatalf("%s %d: Done is not closed after the failed start returned", via, i)
			}
			// A goroutine that has signalled its end may still be returning (CI: Start's watcher,
			// runnable on its closing line after the close Start waited for): wait it out.
			for deadline, left := time.Now().Add(time.Second), tidemarkGoroutines(); len(left) > 0; left = tidemarkGoroutines() {
				if time.Now().After(deadline) {
					t.Fatalf("%s %d: left running after the failed start: %v", via, i, left)
				}
				goruntime.Gosched()
			}
			require.NoError(t, app.Shutdown(ctx))
			cancel()
		}
	}
}

// When another shutdown is first (here the user's, while a handler holds the drain), Run returns
// only once it has finished, with its result: not when Run's own ShutdownTimeout passes.
func TestRunWaitsForAShutdownThatWasFirst(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "a")
	running, release := make(chan struct{}), make(chan struct{})
	app := runtime.New(appOpts(c, runtime.ShutdownTimeout(time.Nanosecond))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error {
			close(running)
			<-release // ignores its ctx: the drain waits for it
			return nil
		}))
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	ran := make(chan error, 1)
	go func() { ran <- app.Run(runCtx) }()
	waitClosed(t, running, "the handler never ran")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- app.Shutdown(ctx) }()
	eventually(t, func() bool { s, _ := app.State(); return s == runtime.StateShuttingDown }, "Shutdown never began")
	stopRun() // Run's own Shutdown now waits 1ns at most
	close(release)
	require.NoError(t, <-ran, "Run returns the first shutdown's result")
	select {
	case <-app.Done():
	default:
		t.Fatal("Run returned before the Shutdown had finished")
	}
	require.NoError(t, <-shut)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1})
}

// A Partitions subscription naming a partition its topic does not have fails Start, naming the
// partition, instead of waiting for records that never come.
func TestStartFailsOnAMissingPartition(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 2))
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Partitions("in", 1, 7).Group("g"), ack, runtime.RetryToSource())
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	err := app.Start(ctx)
	require.EqualError(t, err, `tidemark: Partitions("in", [1 7]): topic "in" has no partition 7 (it has 2)`)
	var ce *runtime.ConfigError
	require.ErrorAs(t, err, &ce)
	require.NoError(t, app.Shutdown(ctx))
}

// A Pattern that matches its own DeadLetter topic would read and dead-letter its dead letters
// forever: Start rejects it, unless kgo.ConsumeExcludeTopics leaves the topic out.
func TestStartRejectsAPatternThatReadsItsDeadLetterTopic(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("ev.in", 1), kfaketest.Topic("ev.dlq", 1))
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()

	app := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
	runtime.Handle(app, runtime.Pattern(`^ev\.`), ack, runtime.DeadLetter("ev.dlq"), runtime.RetryToSource())
	err := app.Start(ctx)
	var ce *runtime.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, `Pattern("^ev\\."): DeadLetter`, ce.Option)
	require.ErrorContains(t, err, `the pattern matches the dead-letter topic "ev.dlq"`)
	require.NoError(t, app.Shutdown(ctx))

	app = runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
	runtime.Handle(app, runtime.Pattern(`^ev\.`).Config(kgo.ConsumeExcludeTopics(`^ev\.dlq$`)), ack,
		runtime.DeadLetter("ev.dlq"), runtime.RetryToSource())
	require.NoError(t, app.Start(ctx))
	require.NoError(t, app.Shutdown(ctx))
}

// Likewise a Pattern that matches its own Reply topic: every reply would be handled and replied to
// again (helper-64).
func TestStartRejectsAPatternThatReadsItsReplyTopic(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("ev.in", 1), kfaketest.Topic("ev.out", 1))
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	echo := runtime.JSONReply(func(_ context.Context, v struct{}) (struct{}, error) { return v, nil })

	app := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
	runtime.Handle(app, runtime.Pattern(`^ev\.`), echo, runtime.Reply("ev.out"), runtime.RetryToSource())
	err := app.Start(ctx)
	var ce *runtime.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, `Pattern("^ev\\."): Reply`, ce.Option)
	require.ErrorContains(t, err, `the pattern matches the reply topic "ev.out"`)
	require.NoError(t, app.Shutdown(ctx))

	app = runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
	runtime.Handle(app, runtime.Pattern(`^ev\.in$`), echo, runtime.Reply("ev.out"), runtime.RetryToSource())
	require.NoError(t, app.Start(ctx))
	require.NoError(t, app.Shutdown(ctx))
}

// A Pattern that matches a topic another subscription of its group reads would have the group split
// that topic's partitions between the two handlers (each subscription is a member with a client of
// its own): Start rejects it, naming both, and handles nothing (helper-101). Another group, or
// kgo.ConsumeExcludeTopics, leaves the two apart.
func TestStartRejectsAPatternThatSharesATopicWithItsGroup(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("ov.a", 1), kfaketest.Topic("ov.b", 1), kfaketest.Topic("ov.c", 1),
		kfaketest.Topic("other", 1))
	c.ProduceValues(t, "ov.a", 0, "a0")
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	var handled atomic.Int64
	count := runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error {
		handled.Add(1)
		return nil
	})
	startErr := func(add func(app *runtime.App)) error {
		t.Helper()
		app := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
		add(app)
		err := app.Start(ctx)
		require.NoError(t, app.Shutdown(ctx))
		return err
	}

	// A Topic, and a RetryTo topic, the pattern matches.
	err := startErr(func(app *runtime.App) {
		runtime.Handle(app, runtime.Pattern(`^ov\.`).Commit(runtime.Tracked), count, runtime.RetryToSource())
		runtime.Handle(app, runtime.Topic("ov.a").Commit(runtime.Tracked), count)
		runtime.Handle(app, runtime.Topic("other").Commit(runtime.Tracked), count, runtime.RetryTo("ov.c"))
	})
	require.EqualError(t, err, `tidemark: Pattern("^ov\\."): the pattern matches the topic "ov.a", which Topic("ov.a") reads in group "g" too: `+
		`the group would split its partitions between the two handlers (exclude it with the pattern or with kgo.ConsumeExcludeTopics in this subscription's Config, or use another group)`+"\n"+
		`tidemark: Pattern("^ov\\."): the pattern matches the topic "ov.c", which Topic("other") reads in group "g" too: `+
		`the group would split its partitions between the two handlers (exclude it with the pattern or with kgo.ConsumeExcludeTopics in this subscription's Config, or use another group)`)
	var ce *runtime.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, `Pattern("^ov\\.")`, ce.Option)

	// Two patterns that both match topics the cluster has.
	err = startErr(func(app *runtime.App) {
		runtime.Handle(app, runtime.Pattern(`^ov\.[ab]$`).Commit(runtime.Tracked), count, runtime.RetryToSource())
		runtime.Handle(app, runtime.Pattern(`^ov\.`).Commit(runtime.Tracked), count, runtime.RetryToSource())
	})
	require.EqualError(t, err, `tidemark: Pattern("^ov\\."): the pattern matches "ov.a", "ov.b", which Pattern("^ov\\.[ab]$") matches in group "g" too: `+
		`the group would split their partitions between the two handlers (make the patterns disjoint, or use another group)`)
	require.ErrorAs(t, err, &ce)
	require.Zero(t, handled.Load(), "a refused Start handles nothing")
	require.Empty(t, c.Committed(t, "g", "ov.a"), "a refused Start commits nothing")

	// Apart: another group, an exclusion, disjoint patterns.
	require.NoError(t, startErr(func(app *runtime.App) {
		runtime.Handle(app, runtime.Pattern(`^ov\.`).Commit(runtime.Tracked).Config(kgo.ConsumeExcludeTopics(`^ov\.a$`)), count, runtime.RetryToSource())
		runtime.Handle(app, runtime.Topic("ov.a").Group("h").Commit(runtime.Tracked), count)
		runtime.Handle(app, runtime.Pattern(`^ov\.a$`).Commit(runtime.Tracked), count, runtime.RetryToSource())
		runtime.Handle(app, runtime.Pattern(`^oth`).Commit(runtime.Tracked), count, runtime.RetryToSource())
	}))
}

// Start waits, within its bound, for a cluster that cannot be reached yet (a service and its
// cluster started together): it looks the topics up again, logging each failure at Warn, and
// returns once the group has joined. With no cluster at all it returns at its bound, with ctx's
// error and the last network error. It used to fail at once on "connection refused" (helper-54).
func TestStartWaitsForAClusterThatIsNotUpYet(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())

	var out lockedBuffer
	app := runtime.New(runtime.Brokers(fmt.Sprintf("127.0.0.1:%d", port)), runtime.ClientOpts(kfaketest.FastOpts()...),
		runtime.Logger(slog.New(slog.NewTextHandler(&out, nil))))
	var handled atomic.Int64
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error { handled.Add(1); return nil }))
	started := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		started <- app.Start(ctx)
	}()
	eventually(t, func() bool { return strings.Contains(out.String(), "the cluster cannot be reached; trying again") },
		"no failed look-up logged:\n%s", out.String())
	c := kfaketest.New(t, kfaketest.KfakeOpts(kfake.Ports(port)), kfaketest.Topic("in", 1))
	select {
	case err := <-started:
		require.NoError(t, err)
	case <-time.After(kfaketest.WaitTimeout):
		t.Fatal("Start did not return once the cluster was up")
	}
	t.Cleanup(func() { stop(t, app) })
	c.ProduceValues(t, "in", 0, "a", "b")
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2})
	require.Equal(t, int64(2), handled.Load())

	ln, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	none := ln.Addr().String()
	require.NoError(t, ln.Close())
	lone := runtime.New(runtime.Brokers(none), runtime.Logger(testLogger()))
	runtime.Handle(lone, runtime.Topic("in").Group("g"), ack)
	// long enough for a first dial to fail on a loaded machine
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = lone.Start(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "connection refused")
	st, _ := lone.State()
	require.Equal(t, runtime.StateFailed, st)
}

// A broker that refuses the TLS handshake (it wants a client certificate the client does not have)
// is a misconfiguration, not a cluster that is not up yet: Start fails at once, with nothing
// retried. Any network error used to be tried again until Start's bound (helper-57).
func TestStartFailsAtOnceOnARefusedTLSHandshake(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "broker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth:   tls.RequireAnyClientCert,
		MaxVersion:   tls.VersionTLS12, // the alert comes during the client's handshake
	})
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { _ = conn.(*tls.Conn).Handshake(); conn.Close() })
		}
	})

	var out lockedBuffer
	app := runtime.New(runtime.Brokers(ln.Addr().String()),
		runtime.ClientOpts(kgo.DialTLSConfig(&tls.Config{InsecureSkipVerify: true})),
		runtime.Logger(slog.New(slog.NewTextHandler(&out, nil))))
	runtime.Handle(app, runtime.Topic("in").Group("g"), ack)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = app.Start(ctx)
	require.ErrorContains(t, err, "tls")
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.NotContains(t, out.String(), "trying again")
}

// A nil ctx given to Start, Run, Shutdown or Publish panics with a message naming the method,
// before the App changes state: it is still New and starts with a real ctx, and its record is
// handled and committed (helper-121: Start(nil) panicked on a nil pointer, leaving it Starting).
func TestANilContextPanicsBeforeTheAppChanges(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "a")
	var s seen
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked), s.handler())
	var nilCtx context.Context
	for _, m := range []struct {
		name string
		call func()
	}{
		{"Start", func() { _ = app.Start(nilCtx) }},
		{"Run", func() { _ = app.Run(nilCtx) }},
		{"Shutdown", func() { _ = app.Shutdown(nilCtx) }},
		{"Publish", func() { _ = app.Publish(nilCtx, &kgo.Record{Topic: "in"}) }},
	} {
		require.PanicsWithValue(t, "tidemark: App."+m.name+" with a nil context.Context: pass context.Background() or a ctx that ends", m.call)
		state, _ := app.State()
		require.Equal(t, runtime.StateNew, state, "after %s(nil)", m.name)
	}
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1})
	require.Equal(t, []string{"a"}, s.values())
}
