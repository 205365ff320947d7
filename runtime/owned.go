package runtime

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ownedOpts is what a client's options set among the options Tidemark decides for a subscription
// but cannot take back once the user's options have set them, though franz-go accepts them
// (helper-128).
type ownedOpts struct {
	regex      bool    // kgo.ConsumeRegex
	instanceID string  // kgo.InstanceID
	txnID      string  // kgo.TransactionalID
	refused    []error // publishRefusals: a Transactional session produces Tidemark's records too
}

// ownedProblem is one of those options set by the user: what it would do, and where it was set
// ("ClientOpts", or "Config" for the subscription's own).
type ownedProblem struct{ where, text string }

// ownedProblems returns the owned options the user's options set for the consumer of r, the i-th
// registration (in group: validate's), that s cannot take: kgo.ConsumeRegex on a subscription that
// is not a Pattern (its topic names would be read as regular expressions, its dead-letter topic
// included, and a Partitions subscription would read nothing), kgo.InstanceID unless
// runtime.InstanceID is set, which overrides it (one id on every client fences them against each
// other: runtime.InstanceID gives each subscription its own), and a kgo.TransactionalID outside the
// Transactional mode (franz-go then stops autocommitting: nothing would be committed before
// Shutdown; in ClientOpts it is refused as a producer option already, so not here). Tidemark sets
// each of them itself only where it is allowed, so what the client's full options hold elsewhere is
// the user's; removing ClientOpts, or the subscription's Config, says whose (helper-131: probing
// the user's options alone missed them when franz-go refused those alone). One set in both is named
// once, ClientOpts's first. For a Transactional subscription, whose session produces, it also
// returns publishRefusals that its Config adds (ProducerOpts's and ClientOpts's are checkOpts's).
func ownedProblems(cfg appConfig, i int, r registration, group string) []ownedProblem {
	s := r.sub
	static := cfg.instanceID != ""
	bad := func(o ownedOpts) (regex, id, txn bool) {
		return o.regex && s.kind != subPattern, o.instanceID != "" && !static, o.txnID != "" && s.mode.kind != modeTxn
	}
	full := readOwned(cfg, i, r, group)
	regex, id, txn := bad(full)
	if s.mode.kind != modeTxn {
		full.refused = nil // only a Transactional subscription's client produces
	}
	if !regex && !id && !txn && len(full.refused) == 0 {
		return nil
	}
	noConfig, noClient := r, cfg
	noConfig.sub.opts = nil
	noClient.clientOpts = nil
	client := readOwned(cfg, i, noConfig, group)
	cRegex, cID, cTxn := bad(client)
	oRegex, oID, oTxn := bad(readOwned(noClient, i, r, group))
	var ps []ownedProblem
	add := func(found, inClient, inConfig bool, text string) {
		switch {
		case !found:
		case inClient:
			ps = append(ps, ownedProblem{"ClientOpts", text})
		case inConfig:
			ps = append(ps, ownedProblem{"Config", text})
		default: // neither alone makes a client franz-go accepts: say so (helper-132)
			ps = append(ps, ownedProblem{"Config", "set in ClientOpts or in this Config (Start cannot tell which: franz-go refuses each without the other): " + text})
		}
	}
	add(regex, cRegex, oRegex, "kgo.ConsumeRegex would read the subscription's topic names as regular expressions: subscribe with Pattern")
	add(id, cID, oID, "kgo.InstanceID: set the static member id with runtime.InstanceID, which gives each subscription's client its own (one id on two clients fences them)")
	add(txn && !cTxn, false, oTxn, "kgo.TransactionalID stops franz-go's autocommit: nothing would be committed before Shutdown; for exactly-once use Commit(runtime.Transactional(id))")
	for _, e := range full.refused { // ProducerOpts's and ClientOpts's are checkOpts's (helper-117)
		if !slices.Contains(client.refused, e) {
			ps = append(ps, ownedProblem{"Config", e.Error()})
		}
	}
	return ps
}

// readOwned reads ownedOpts from a client made, and closed unused, with the options the consumer
// of r makes its client with (validationConsumer), then no topics or partitions to consume: with
// nothing to fetch or produce, it dials nothing (its group, if any, is joined only once it has
// topics). Options franz-go refuses give the zero ownedOpts (consumerOptsErr reports them).
func readOwned(cfg appConfig, i int, r registration, group string) ownedOpts {
	opts := append(validationConsumer(cfg, i, r, r.sub, group).clientOpts(),
		kgo.ConsumeTopics(), kgo.ConsumePartitions(nil))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return ownedOpts{}
	}
	defer cl.Close()
	var o ownedOpts
	o.regex, _ = cl.OptValue(kgo.ConsumeRegex).(bool)
	o.instanceID, _ = cl.OptValue(kgo.InstanceID).(string)
	o.txnID, _ = cl.OptValue(kgo.TransactionalID).(string)
	o.refused = publishRefusals(cl)
	return o
}
