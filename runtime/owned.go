package runtime

import (
	"context"
	"errors"
	"net"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ownedOptsErrs returns, one sentence each, what the franz-go options opts (a subscription's
// ClientOpts, or its Config: own) set that Tidemark decides for s and cannot take back after them,
// though franz-go accepts them (helper-128): kgo.ConsumeRegex on a subscription that is not a
// Pattern (its topic names would be read as regular expressions, its dead-letter topic included,
// and a Partitions subscription would read nothing), kgo.InstanceID (one id on every client fences
// them against each other: runtime.InstanceID gives each subscription its own, and overrides it
// when set: static), and, in Config, a kgo.TransactionalID outside the Transactional mode (franz-go
// then stops autocommitting: nothing would be committed before Shutdown; ClientOpts's is refused
// with ProducerOpts's). It reads them from a client made with opts and closed unused, whose
// consuming and dialing are taken off: no I/O. Options franz-go refuses give nothing here
// (consumerOptsErr reports them).
func ownedOptsErrs(opts []kgo.Opt, s Subscription, own, static bool) []string {
	if len(opts) == 0 {
		return nil
	}
	noDial := func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("tidemark: a probe client dials nothing")
	}
	probe := append(slices.Clone(opts), kgo.ConsumerGroup(""), kgo.ConsumeTopics(), kgo.Dialer(noDial))
	cl, err := kgo.NewClient(probe...)
	if err != nil {
		return nil
	}
	defer cl.Close()
	var errs []string
	if regex, _ := cl.OptValue(kgo.ConsumeRegex).(bool); regex && s.kind != subPattern {
		errs = append(errs, "kgo.ConsumeRegex would read the subscription's topic names as regular expressions: subscribe with Pattern")
	}
	if id, _ := cl.OptValue(kgo.InstanceID).(string); id != "" && !static {
		errs = append(errs, "kgo.InstanceID: set the static member id with runtime.InstanceID, which gives each subscription's client its own (one id on two clients fences them)")
	}
	if id, _ := cl.OptValue(kgo.TransactionalID).(string); own && id != "" && s.mode.kind != modeTxn {
		errs = append(errs, "kgo.TransactionalID stops franz-go's autocommit: nothing would be committed before Shutdown; for exactly-once use Commit(runtime.Transactional(id))")
	}
	return errs
}
