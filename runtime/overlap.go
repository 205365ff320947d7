package runtime

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// patternOverlaps returns a *ConfigError for each Pattern subscription that matches a topic another
// subscription of its consumer group also reads (DESIGN §3.10: two subscriptions sharing a group
// and a topic). Each subscription is a member of the group with a client of its own, so the
// group's assignor would split that topic's partitions between the two handlers. A named topic
// (Topic, Topics, RetryTo) is checked by name, as franz-go matches it, kgo.ConsumeExcludeTopics
// included; two patterns are checked against the topics the cluster has now, listed only when a
// group has two. A topic created later that two patterns of one group match is split between them:
// the docs of Pattern say so.
func (a *App) patternOverlaps(ctx context.Context) ([]error, error) {
	byGroup := map[string][]*consumer{}
	var groups []string // in registration order, for a stable report
	for _, c := range a.consumers {
		if c.sub.kind == subPartitions || c.group == "" {
			continue
		}
		if _, ok := byGroup[c.group]; !ok {
			groups = append(groups, c.group)
		}
		byGroup[c.group] = append(byGroup[c.group], c)
	}
	var (
		errs     []error
		existing []string // every topic of the cluster, listed once and only if needed
		listed   bool
	)
	for _, g := range groups {
		cs := byGroup[g]
		for i, p := range cs {
			if p.sub.kind != subPattern {
				continue
			}
			for j, o := range cs {
				if j == i {
					continue
				}
				for _, t := range namedTopics(o) {
					if p.consumesByPattern(t) {
						errs = append(errs, configErr(p.sub.String(), "the pattern matches the topic %q, which %s reads in group %q too: "+
							"the group would split its partitions between the two handlers (exclude it with the pattern or "+
							"with kgo.ConsumeExcludeTopics in this subscription's Config, or use another group)", t, o.sub.String(), g))
					}
				}
				if o.sub.kind != subPattern || j > i {
					continue // a pair of patterns is checked once, by the later one
				}
				if !listed {
					details, err := a.listTopics(ctx, nil)
					if err != nil {
						return nil, err
					}
					for t, td := range details {
						if td.Err == nil {
							existing = append(existing, t)
						}
					}
					slices.Sort(existing)
					listed = true
				}
				var both []string
				for _, t := range existing {
					if p.consumesByPattern(t) && o.consumesByPattern(t) {
						both = append(both, fmt.Sprintf("%q", t))
					}
				}
				if len(both) > 0 {
					errs = append(errs, configErr(p.sub.String(), "the pattern matches %s, which %s matches in group %q too: "+
						"the group would split their partitions between the two handlers (make the patterns disjoint, or use "+
						"another group)", strings.Join(both, ", "), o.sub.String(), g))
				}
			}
		}
	}
	return errs, nil
}

// namedTopics returns the topics a group subscription reads by name: its topics (none for a
// Pattern) and its RetryTo topic.
func namedTopics(c *consumer) []string {
	ts := slices.Clone(c.sub.topics)
	if t := c.cfg.retryTo; t != "" && !slices.Contains(ts, t) {
		ts = append(ts, t)
	}
	return ts
}
