package runtime

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ownedOpts is what a set of franz-go options (the App's ClientOpts, alone or with a subscription's
// Config) sets among the options Tidemark decides but cannot take back after them, though franz-go
// accepts them (helper-128).
type ownedOpts struct {
	regex      bool   // kgo.ConsumeRegex
	instanceID string // kgo.InstanceID
	txnID      string // kgo.TransactionalID
}

// readOwned reads ownedOpts from a client made with opts and closed unused, with no group, topics
// or partitions to consume: it has nothing to fetch or produce, and dials nothing (a Dialer of its
// own would clash with a kgo.DialTLSConfig of the user's: helper-130). Options franz-go refuses
// give the zero ownedOpts (consumerOptsErr reports them), and so do none.
func readOwned(opts []kgo.Opt) ownedOpts {
	if len(opts) == 0 {
		return ownedOpts{}
	}
	probe := append(slices.Clone(opts), kgo.ConsumerGroup(""), kgo.ConsumeTopics(), kgo.ConsumePartitions(nil))
	cl, err := kgo.NewClient(probe...)
	if err != nil {
		return ownedOpts{}
	}
	defer cl.Close()
	var o ownedOpts
	o.regex, _ = cl.OptValue(kgo.ConsumeRegex).(bool)
	o.instanceID, _ = cl.OptValue(kgo.InstanceID).(string)
	o.txnID, _ = cl.OptValue(kgo.TransactionalID).(string)
	return o
}

// errs returns, one sentence each, what o sets that s cannot take, minus what app (the App's
// ClientOpts alone, reported for the first subscription it fails) sets already: kgo.ConsumeRegex on
// a subscription that is not a Pattern (its topic names would be read as regular expressions, its
// dead-letter topic included, and a Partitions subscription would read nothing), kgo.InstanceID
// unless runtime.InstanceID is set (static), which overrides it (one id on every client fences them
// against each other: runtime.InstanceID gives each subscription its own), and a
// kgo.TransactionalID outside the Transactional mode (franz-go then stops autocommitting: nothing
// would be committed before Shutdown; ClientOpts's is refused with ProducerOpts's).
func (o ownedOpts) errs(s Subscription, app ownedOpts, static bool) []string {
	var errs []string
	if o.regex && !app.regex && s.kind != subPattern {
		errs = append(errs, "kgo.ConsumeRegex would read the subscription's topic names as regular expressions: subscribe with Pattern")
	}
	if o.instanceID != "" && app.instanceID == "" && !static {
		errs = append(errs, "kgo.InstanceID: set the static member id with runtime.InstanceID, which gives each subscription's client its own (one id on two clients fences them)")
	}
	if o.txnID != "" && app.txnID == "" && s.mode.kind != modeTxn {
		errs = append(errs, "kgo.TransactionalID stops franz-go's autocommit: nothing would be committed before Shutdown; for exactly-once use Commit(runtime.Transactional(id))")
	}
	return errs
}
