package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/runtime"
)

// A Payout is one record of the payouts topic: pay AmountCents to Account.
type Payout struct {
	ID          string `json:"id"`
	Account     string `json:"account"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// Paid is pay_out's reply on payouts.done, keyed by the payout's id: the payout went through on
// the bank's Calls-th call for it.
type Paid struct {
	PayoutID    string `json:"payout_id"`
	AmountCents int64  `json:"amount_cents"`
	Calls       int    `json:"calls"`
}

// A PageView is one record of the page-views topic, keyed by User.
type PageView struct {
	ID   string `json:"id"`
	User string `json:"user"`
	Page string `json:"page"`
	MS   int    `json:"ms"` // time on the page
}

// A StatementLine is one line of a bank statement, keyed by Statement: the bank says it paid
// AmountCents for Payout. An empty line has neither.
type StatementLine struct {
	Statement   string `json:"statement"`
	Line        int    `json:"line"`
	Payout      string `json:"payout"`
	AmountCents int64  `json:"amount_cents"`
}

// The errors the service's handlers return. The Observer sorts dead letters by them.
var (
	errZeroAmount       = errors.New("payout of zero cents")
	errEmptyLine        = errors.New("empty statement line")
	errBankUnavailable  = errors.New("bank unavailable")
	errStoreUnavailable = errors.New("counters store unavailable")
)

// maxAttempts caps pay_out's deliveries of one payout: the original and up to four retry copies.
const maxAttempts = 5

// backoff is the wait before pay_out's retry copy of a failed attempt is due: 5 ms after the first
// failure, 20 ms after the fourth, so the demo stays quick.
func backoff(attempt int, _ error) time.Duration {
	return time.Duration(attempt) * 5 * time.Millisecond
}

// A service is the payouts service of DESIGN §4: a bank that pays payouts, a counters store for
// page views and a ledger that reconciles bank statements. Its handlers are safe for concurrent
// use from every lane.
type service struct {
	bank     *bank
	counters *counters
	ledger   *ledger
}

// newService returns a service with an empty bank, counters store and ledger.
func newService() *service {
	return &service{
		bank:     &bank{calls: map[string]int{}},
		counters: &counters{views: map[string]int64{}},
		ledger:   &ledger{statements: map[string]bool{}},
	}
}

// register adds the three subscriptions to app, each with workers lanes:
//
//   - pay_out (Tracked, group payouts): pays each payout and replies on payouts.done; a failed
//     bank call is retried with a retry copy, at most maxAttempts deliveries in all, then the
//     payout goes to payouts.dlq, as zero amounts (dropped) and undecodable lines do.
//   - count_view (Auto, group analytics): counts page views; a failed store call cannot be
//     retried under Auto, so that view is lost (ErrRetryUnsupported).
//   - reconcile (Tracked, group reconciliation): posts statement lines to the ledger in batches of
//     up to 500; empty lines are dropped one by one.
func (s *service) register(app *runtime.App, workers int) {
	runtime.Handle(app, runtime.Topic("payouts").Commit(runtime.Tracked),
		runtime.JSONReply(s.payOut), runtime.Reply("payouts.done"),
		runtime.MaxAttempts(maxAttempts), runtime.DeadLetter("payouts.dlq"), runtime.Backoff(backoff),
		runtime.Workers(workers), runtime.ByKey)
	runtime.Handle(app, runtime.Topic("page-views").Group("analytics"),
		runtime.JSON(s.countView), runtime.Workers(workers), runtime.ByKey)
	runtime.HandleBatch(app, runtime.Topic("statements").Group("reconciliation").Commit(runtime.Tracked), 500,
		runtime.JSONBatch(s.reconcile), runtime.Workers(workers))
}

// A subscription names one of register's subscriptions, for the summary.
type subscription struct {
	name  string // the handler's name
	group string
	topic string
	mode  runtime.CommitMode
}

// subscriptions are register's subscriptions, in its order.
var subscriptions = []subscription{
	{"pay_out", "payouts", "payouts", runtime.Tracked},
	{"count_view", "analytics", "page-views", runtime.Auto},
	{"reconcile", "reconciliation", "statements", runtime.Tracked},
}

// payOut pays p through the bank. A zero amount is dropped (to payouts.dlq, which is declared); a
// failed bank call asks for a retry, which MaxAttempts turns into a retry copy until the payout's
// attempts are spent.
func (s *service) payOut(ctx context.Context, p Payout) (Paid, error) {
	if p.AmountCents == 0 {
		return Paid{}, runtime.Drop(fmt.Errorf("%s: %w", p.ID, errZeroAmount))
	}
	calls, err := s.bank.pay(ctx, p)
	if err != nil {
		return Paid{}, runtime.Retry(err)
	}
	return Paid{PayoutID: p.ID, AmountCents: p.AmountCents, Calls: calls}, nil
}

// countView adds v to the counters. A failed store call asks for a retry, which the Auto mode
// refuses: the view is lost, and the Observer counts it.
func (s *service) countView(ctx context.Context, v PageView) error {
	if err := s.counters.add(ctx, v); err != nil {
		return runtime.Retry(err)
	}
	return nil
}

// reconcile posts a batch of statement lines to the ledger and drops the empty ones.
func (s *service) reconcile(ctx context.Context, ls []StatementLine) []error {
	errs := make([]error, len(ls))
	post := make([]StatementLine, 0, len(ls))
	for i, l := range ls {
		if l.Payout == "" && l.AmountCents == 0 {
			errs[i] = runtime.Drop(fmt.Errorf("%s line %d: %w", l.Statement, l.Line, errEmptyLine))
			continue
		}
		post = append(post, l)
	}
	s.ledger.post(post)
	return errs
}

// failureSeed seeds the demo's failure functions, so every run fails the same calls.
const failureSeed = "tidemark-demo-1"

// hash is FNV-1a over failureSeed, what and id.
func hash(what, id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(failureSeed))
	h.Write([]byte(what))
	h.Write([]byte(id))
	return h.Sum64()
}

// bankFailures returns how many of the bank's first calls for payout id fail: none for 85% of
// payouts, 1 to 4 for 14.2%, and 7 (more than maxAttempts allows, so the payout is spent) for 0.8%.
func bankFailures(id string) int {
	switch h := hash("bank/", id) % 1000; {
	case h < 850:
		return 0
	case h < 930:
		return 1
	case h < 965:
		return 2
	case h < 980:
		return 3
	case h < 992:
		return 4
	default:
		return 7
	}
}

// storeFails reports whether the counters store fails to count page view id: 1.5% of views.
func storeFails(id string) bool { return hash("counters/", id)%1000 < 15 }

// A bank pays payouts. It fails the first bankFailures(id) calls for a payout (a flaky line to
// that account) and pays it on the next one; it remembers calls per payout, as a bank that takes an
// idempotency key does.
type bank struct {
	mu      sync.Mutex
	calls   map[string]int // calls so far, by payout id
	payouts int64          // payouts paid
	cents   int64          // cents paid
}

// pay pays p, or fails, and returns which call for p this was (from 1).
func (b *bank) pay(ctx context.Context, p Payout) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls[p.ID]++
	n := b.calls[p.ID]
	if n <= bankFailures(p.ID) {
		return n, fmt.Errorf("paying %s, call %d: %w", p.ID, n, errBankUnavailable)
	}
	b.payouts++
	b.cents += p.AmountCents
	return n, nil
}

// counters counts page views by page. It fails for the views storeFails picks.
type counters struct {
	mu    sync.Mutex
	views map[string]int64 // by page
	total int64
}

// add counts v, or fails when storeFails picks it.
func (c *counters) add(ctx context.Context, v PageView) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if storeFails(v.ID) {
		return fmt.Errorf("counting %s: %w", v.ID, errStoreUnavailable)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.views[v.Page]++
	c.total++
	return nil
}

// A ledger holds the reconciled statement lines.
type ledger struct {
	mu         sync.Mutex
	statements map[string]bool // statements with at least one line posted
	lines      int64
	cents      int64
}

// post adds the lines to their statements.
func (l *ledger) post(ls []StatementLine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range ls {
		l.statements[s.Statement] = true
		l.lines++
		l.cents += s.AmountCents
	}
}

// Effects is what the handlers did, as the bank, the counters store and the ledger saw it.
type Effects struct {
	Payouts     int64 // payouts the bank paid
	PaidCents   int64
	Views       int64 // page views counted
	Pages       int   // distinct pages counted
	Lines       int64 // statement lines posted to the ledger
	Statements  int   // statements with a posted line
	LedgerCents int64
	BankCalls   int64 // calls the bank received, failed ones included
}

// effects returns what the service did so far.
func (s *service) effects() Effects {
	var e Effects
	s.bank.mu.Lock()
	e.Payouts, e.PaidCents = s.bank.payouts, s.bank.cents
	for _, n := range s.bank.calls {
		e.BankCalls += int64(n)
	}
	s.bank.mu.Unlock()
	s.counters.mu.Lock()
	e.Views, e.Pages = s.counters.total, len(s.counters.views)
	s.counters.mu.Unlock()
	s.ledger.mu.Lock()
	e.Lines, e.Statements, e.LedgerCents = s.ledger.lines, len(s.ledger.statements), s.ledger.cents
	s.ledger.mu.Unlock()
	return e
}
