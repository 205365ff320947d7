package runtime

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Upper bounds of sizes, so that a typo (a few zeros too many) fails Start instead of allocating
// gigabytes: lanes are goroutines, and the per-partition bound, MaxPollRecords and a batch size
// size a tracker ring (24 bytes a slot, per partition) or a lane's buffer (8 bytes a record).
const (
	maxWorkers = 1 << 16 // lanes per subscription
	maxRecords = 1 << 20 // MaxInFlightPerPartition, MaxPollRecords, a HandleBatch size
)

// validate checks every option before any I/O and returns all problems joined, each a *ConfigError
// naming its option (DESIGN §3.10). prodErr is what the producer's checkOpts found.
func validate(cfg appConfig, regs []registration, prodErr error) error {
	errs := slices.Clone(cfg.nilOpts)
	add := func(option, format string, args ...any) { errs = append(errs, configErr(option, format, args...)) }

	if len(cfg.brokers) == 0 {
		add("Brokers", "no seed brokers given")
	}
	if slices.Contains(cfg.brokers, "") {
		add("Brokers", "empty broker address")
	} else if err := kgo.ValidateOpts(kgo.SeedBrokers(cfg.brokers...)); len(cfg.brokers) > 0 && err != nil {
		add("Brokers", "%w", err)
	}
	if cfg.observer == nil {
		add("Observe", "nil observer: leave the option out for none")
	}
	if cfg.maxPollRecords < 1 || cfg.maxPollRecords > maxRecords {
		add("MaxPollRecords", "need 1 to %d, got %d", maxRecords, cfg.maxPollRecords)
	}
	if cfg.shutdownTimeout <= 0 {
		add("ShutdownTimeout", "need a positive duration, got %s", cfg.shutdownTimeout)
	}
	if cfg.flushTimeout <= 0 {
		add("FlushTimeout", "need a positive duration, got %s", cfg.flushTimeout)
	}
	if cfg.queueTimeout < 0 {
		add("QueueTimeout", "need 0 (wait) or a positive duration, got %s", cfg.queueTimeout)
	}
	if cfg.revokeDrainTimeout <= 0 {
		add("RevokeDrainTimeout", "need a positive duration, got %s", cfg.revokeDrainTimeout)
	}
	for _, e := range unjoin(prodErr) { // one *ConfigError per problem, each errors.Is-able
		errs = append(errs, &ConfigError{Option: "ProducerOpts", Err: e})
	}
	if len(regs) == 0 {
		add("Handle", "no subscription registered")
	}

	type groupTopic struct{ group, topic string }
	groupSubs := map[groupTopic]string{} // group subscription topics, by group
	groupUsers := map[string]string{}    // group → a group subscription using it
	manualGroups := map[string]string{}  // group → a manual subscription using it
	type manualPart struct {
		group, topic string
		partition    int32
	}
	manualParts := map[manualPart]string{} // a group's manually read partitions → the subscription reading it
	txnIDs := map[string]string{}          // transactional id → the subscription using it
	shared := map[string]int{}             // registrations per subscription name: a shared one is named with its group
	refusals := map[string]bool{}          // franz-go's refusals of the App's options reported: each once
	for _, e := range unjoin(prodErr) {
		refusals[e.Error()] = true
	}
	for _, r := range regs {
		shared[r.sub.String()]++
	}
	for i, r := range regs {
		s := r.sub
		name := subName(s, shared)
		group := s.group
		if s.kind != subPartitions && group == "" && !s.emptyGroup {
			group = cfg.defaultGroup
		}
		registered := "Handle"
		if r.isBatch {
			registered = "HandleBatch"
		}
		for _, n := range r.cfg.nilOpts {
			add(name+": "+registered, "option %d is nil", n)
		}
		for _, n := range s.nilOpts {
			add(name+".Config", "option %d is nil", n)
		}
		if s.emptyGroup {
			add(name+".Group", "empty consumer group name")
		}
		switch {
		case r.isBatch && (r.batchN < 1 || r.batchN > maxRecords):
			add(name+": HandleBatch", "need a batch size of 1 to %d, got %d", maxRecords, r.batchN)
		case r.isBatch && isNil(r.batch):
			add(name+": HandleBatch", "nil batch handler")
		case r.isBatch && r.cfg.replyTopic != "":
			add(name+": Reply", "batch handlers publish no replies")
		case !r.isBatch && isNil(r.handler):
			add(name+": Handle", "nil handler")
		}
		_, replies := r.handler.(replyHandler)
		if replies && r.cfg.replyTopic == "" {
			add(name+": JSONReply", "needs Reply(topic) to name where results go")
		}
		if !r.isBatch && !replies && r.cfg.replyTopic != "" && !isNil(r.handler) {
			add(name+": Reply", "the handler publishes no reply: use JSONReply")
		}
		if s.mode.kind == modeTxn {
			if s.mode.txnID == "" {
				add(name+".Commit", "Transactional needs a transactional id, stable per running instance")
			} else if other, dup := txnIDs[s.mode.txnID]; dup {
				add(name+".Commit", "transactional id %q is also used by %s: two sessions with one id fence each other", s.mode.txnID, other)
			}
			txnIDs[s.mode.txnID] = name
			if s.kind == subPartitions {
				add(name+".Commit", "Transactional needs group membership: manual partitions cannot use it")
			}
		}
		if r.cfg.commitInterval <= 0 {
			add(name+": CommitInterval", "need a positive duration, got %s", r.cfg.commitInterval)
		}
		if r.cfg.windowTimeout <= 0 {
			add(name+": WindowTimeout", "need a positive duration, got %s", r.cfg.windowTimeout)
		}
		for _, option := range slices.Compact(slices.Sorted(slices.Values(r.cfg.emptyTopics))) {
			add(name+": "+option, "empty topic name")
		}
		if r.cfg.maxAttemptsSet && r.cfg.maxAttempts < 1 {
			add(name+": MaxAttempts", "need at least 1, got %d", r.cfg.maxAttempts)
		}
		multi := s.kind != subTopics || len(s.topics) > 1
		if multi && r.cfg.retryTo == "" && !r.cfg.retryToSource {
			add(name+": RetryTo", "a multi-topic, pattern or manual-partition subscription must name its retry address with RetryTo(topic) or RetryToSource()")
		}
		if s.kind == subPartitions && r.cfg.retryTo != "" {
			add(name+": RetryTo", "a manual-partition subscription cannot consume another topic: use RetryToSource()")
		}
		if r.cfg.workers < 1 || r.cfg.workers > maxWorkers {
			add(name+": Workers", "need 1 to %d lanes, got %d", maxWorkers, r.cfg.workers)
		}
		if r.cfg.maxInFlightPerPart < 1 || r.cfg.maxInFlightPerPart > maxRecords {
			add(name+": MaxInFlightPerPartition", "need 1 to %d, got %d", maxRecords, r.cfg.maxInFlightPerPart)
		}
		if r.cfg.maxInFlight < 0 {
			add(name+": MaxInFlight", "need 0 (no bound) or more, got %d", r.cfg.maxInFlight)
		}
		if r.cfg.backoff == nil {
			add(name+": Backoff", "nil backoff function")
		}
		if r.cfg.ordering > Unordered {
			add(name+": Ordering", "unknown ordering %d", r.cfg.ordering)
		}
		if r.cfg.panicPolicy > PanicDrop {
			add(name+": OnPanic", "unknown panic policy %d", r.cfg.panicPolicy)
		}
		if s.start > Latest {
			add(name+".Start", "unknown start offset %d", s.start)
		}
		if !clientCheckable(s, group) {
			// reported on its own
		} else if option, err := consumerOptsErr(cfg, i, r, group); err != nil {
			switch {
			case option == "Config" || option == "Commit": // the subscription's own: each reported
				add(name+"."+option, "%w", err)
			case !refusals[err.Error()]: // the App's options: once, whichever clients they fail
				refusals[err.Error()] = true
				add(option, "%s: %w", name, err)
			}
		} else {
			for _, p := range ownedProblems(cfg, i, r, group) {
				switch {
				case p.where == "Config":
					add(name+".Config", "%s", p.text)
				case !refusals[p.text]: // the App's options: once
					refusals[p.text] = true
					add("ClientOpts", "%s: %s", name, p.text)
				}
			}
		}
		if dl := r.cfg.deadLetter; dl != "" {
			if slices.Contains(s.topics, dl) { // a Pattern's own: checkTopics, which knows its exclusions
				add(name+": DeadLetter", "the dead-letter topic %q is a topic of the subscription: a dead letter would be read again", dl)
			}
			if dl == r.cfg.retryTo {
				add(name+": DeadLetter", "the dead-letter topic %q is also the retry topic (RetryTo)", dl)
			}
		}
		if rt := r.cfg.replyTopic; rt != "" && (slices.Contains(s.topics, rt) || rt == r.cfg.retryTo) {
			// A Pattern's own: checkTopics. Every reply would be read again, and replied to.
			add(name+": Reply", "the reply topic %q is read by the subscription: every reply would be handled and replied to again", rt)
		}
		switch s.kind {
		case subTopics:
			if len(s.topics) == 0 {
				add(name, "no topic named")
			}
			for i, t := range s.topics {
				switch {
				case t == "":
					add(name, "empty topic name")
				case slices.Index(s.topics, t) < i && slices.Index(s.topics[i+1:], t) < 0: // once per topic
					add(name, "topic %q is named twice", t)
				}
			}
		case subPattern:
			if s.pattern == "" || !strings.HasPrefix(s.pattern, "^") {
				add(name, "a pattern must be anchored: it must start with \"^\"")
			}
			if _, err := regexp.Compile(s.pattern); err != nil {
				add(name, "invalid regular expression: %w", err)
			}
		case subPartitions:
			if s.topics[0] == "" {
				add(name, "empty topic name")
			}
			if len(s.partitions) == 0 {
				add(name, "no partition named")
			}
			ps := slices.Sorted(slices.Values(s.partitions))
			for i := 1; i < len(ps); i++ {
				if ps[i] == ps[i-1] && (i == 1 || ps[i-2] != ps[i]) {
					add(name, "partition %d is named twice", ps[i])
				}
			}
			if len(ps) > 0 && ps[0] < 0 {
				add(name, "need partitions of 0 or more, got %d", ps[0])
			}
			if s.mode.kind == modeTracked && group == "" && !s.emptyGroup {
				add(name+".Group", "the Tracked mode on manual partitions commits into a group: name one with Group")
			}
		}
		if s.kind != subPartitions {
			if group == "" {
				if !s.emptyGroup { // reported as such above
					add(name+".Group", "no consumer group: name one with Group or DefaultGroup")
				}
				continue
			}
			groupUsers[group] = name
			topics := slices.Compact(slices.Sorted(slices.Values(s.topics))) // a topic named twice: reported above
			if r.cfg.retryTo != "" && !slices.Contains(topics, r.cfg.retryTo) {
				topics = append(topics, r.cfg.retryTo)
			}
			for _, t := range topics {
				k := groupTopic{group, t}
				own, whose := "", name
				if !slices.Contains(s.topics, t) {
					own, whose = " (its RetryTo topic)", name+" (as its RetryTo topic)"
				}
				if other, dup := groupSubs[k]; dup {
					add(name, "shares group %q and topic %q%s with %s", group, t, own, other)
				}
				groupSubs[k] = whose
			}
			if s.kind == subPattern { // the same pattern twice: whether or not a topic matches yet
				k := groupTopic{group, "\x00" + s.pattern}
				if other, dup := groupSubs[k]; dup {
					add(name, "shares group %q and pattern %q with %s", group, s.pattern, other)
				}
				groupSubs[k] = name
			}
		} else if group != "" {
			manualGroups[group] = name
			for _, p := range slices.Compact(slices.Sorted(slices.Values(s.partitions))) { // twice: reported above
				k := manualPart{group, s.topics[0], p}
				if other, dup := manualParts[k]; dup { // both would commit it, each its own offset
					add(name, "shares group %q and partition %d of topic %q with %s", group, p, s.topics[0], other)
				}
				manualParts[k] = name
			}
		}
	}
	for group, manual := range manualGroups {
		if user, ok := groupUsers[group]; ok {
			errs = append(errs, &ConfigError{Option: manual + ".Group",
				Err: fmt.Errorf("group %q is also used by the group subscription %s; manual partitions need a group of their own", group, user)})
		}
	}
	return errors.Join(errs...)
}

// consumerOptsErr returns franz-go's refusal (kgo.ValidateOpts, no I/O) of the options the
// consumer of r, the i-th registration (in group: validate's), makes its client with, and the
// option at fault, the first without which the client is refused otherwise (or not at all): r's
// subscription's Config, its
// Commit (a Transactional id past franz-go's bound), ProducerOpts (a Transactional subscription's
// client takes them too), else ClientOpts. A franz-go option in the wrong place
// (kgo.ConsumeExcludeTopics on a subscription without a Pattern, a session timeout under 100 ms)
// fails Start with the other problems, not later at the client's creation. franz-go names one
// problem of a client: the next shows once it is fixed.
func consumerOptsErr(cfg appConfig, i int, r registration, group string) (option string, err error) {
	refused := func(cfg appConfig, s Subscription) error {
		// The seeds last: Brokers is checked on its own.
		return kgo.ValidateOpts(append(validationConsumer(cfg, i, r, s, group).clientOpts(), kgo.SeedBrokers("127.0.0.1"))...)
	}
	if err = refused(cfg, r.sub); err == nil {
		return "", nil
	}
	same := func(e error) bool { return e != nil && e.Error() == err.Error() }
	s := r.sub
	s.opts = nil
	if !same(refused(cfg, s)) {
		return "Config", err
	}
	s.mode.txnID = ""
	if !same(refused(cfg, s)) {
		return "Commit", err
	}
	cfg.producerOpts = nil
	if !same(refused(cfg, s)) {
		return "ProducerOpts", err
	}
	return "ClientOpts", err
}

// validationConsumer is the consumer of r, the i-th registration, as far as its clientOpts go,
// with s as its subscription, for Start's checks of its client's options (consumerOptsErr,
// ownedProblems): it makes no client of its own (probed), and has no logger or hook.
func validationConsumer(cfg appConfig, i int, r registration, s Subscription, group string) *consumer {
	if s.mode.txnID == "" {
		s.mode.txnID = "probe" // an empty one is the Commit check's
	}
	return &consumer{app: &App{cfg: cfg}, idx: i, sub: s, cfg: r.cfg, group: group,
		txnMode: s.mode.kind == modeTxn, manual: s.kind == subPartitions,
		probed: true, txnPart: kgo.StickyKeyPartitioner(nil)}
}

// clientCheckable reports whether the options of s's client can be checked: a problem of s's own
// that would make franz-go refuse them too (no group, an empty topic name, a pattern that does not
// compile) is reported on its own.
func clientCheckable(s Subscription, group string) bool {
	if s.kind != subPartitions && group == "" || slices.Contains(s.topics, "") {
		return false
	}
	_, err := regexp.Compile(s.pattern)
	return err == nil
}

// unjoin returns the errors errors.Join joined in err, at any depth; err itself if it joins none;
// nothing for nil.
func unjoin(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		if err == nil {
			return nil
		}
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, unjoin(e)...)
	}
	return out
}

// isNil reports whether a handler is nil: the interface itself, or a nil function in it (a
// HandlerFunc(nil), say), which would panic on the first record.
func isNil(h any) bool {
	if h == nil {
		return true
	}
	v := reflect.ValueOf(h)
	return v.Kind() == reflect.Func && v.IsNil()
}

// subName names s in a ConfigError: its String, and its group too when shared (registrations per
// subscription name) counts more than one registration of that name.
func subName(s Subscription, shared map[string]int) string {
	name := s.String()
	if shared[name] > 1 && s.group != "" {
		name += fmt.Sprintf(".Group(%q)", s.group)
	}
	return name
}
