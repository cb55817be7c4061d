package examples

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/examples/fakepay"
)

// Workflow and activity names; they travel on the wire.
const (
	WorkflowOnboarding   = "onboarding"
	WorkflowCharge       = "charge"
	WorkflowCollect      = "collect"
	WorkflowSleep        = "sleep"
	WorkflowDigest       = "digest"
	ActivityCreateDBUser = "create_db_user"
	ActivitySendWelcome  = "send_welcome_email"
	ActivityChargeCard   = "charge_card"
)

// Services are the fake downstream systems the example activities call.
type Services struct {
	Users *KeyedLog
	Mail  *KeyedLog
	// Payments is the in-process provider; PaymentsAPI is what charge_card
	// calls: Payments itself, unless it is pointed at one served over HTTP.
	Payments    *fakepay.Provider
	PaymentsAPI fakepay.API
	// Bench counts the runs of bench_echo's activity.
	Bench *BenchCounter
}

// NewServices returns empty fakes.
func NewServices() *Services {
	p := fakepay.New()
	return &Services{Users: NewKeyedLog(), Mail: NewKeyedLog(), Payments: p, PaymentsAPI: p, Bench: &BenchCounter{}}
}

// KeyedLog is a fake downstream system that performs each effect once per
// idempotency key, as a database insert with a unique key or an email API
// with an idempotency header would. Safe for concurrent use.
type KeyedLog struct {
	mu      sync.Mutex
	effects map[string]string
	calls   int
}

// NewKeyedLog returns an empty log.
func NewKeyedLog() *KeyedLog { return &KeyedLog{effects: map[string]string{}} }

// Do performs effect under key once; repeats return the first result.
func (l *KeyedLog) Do(key, effect string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if have, ok := l.effects[key]; ok {
		return have
	}
	l.effects[key] = effect
	return effect
}

// Effects is the number of distinct effects performed.
func (l *KeyedLog) Effects() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.effects)
}

// Calls is the number of requests, repeats included.
func (l *KeyedLog) Calls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

// OnboardingInput is the input of onboarding.
type OnboardingInput struct {
	UserID int64 `json:"user_id"`
}

// OnboardingResult is the result of onboarding.
type OnboardingResult struct {
	UserID   int64  `json:"user_id"`
	DBUser   string `json:"db_user"`
	EmailRef string `json:"email_ref"`
}

// ChargeInput is the input of charge.
type ChargeInput struct {
	AmountCents int64  `json:"amount_cents"`
	CustomerID  string `json:"customer_id"`
}

// ChargeInputSchema is the JSON Schema of charge's input.
const ChargeInputSchema = `{
	"$schema": "https://json-schema.org/draft/2020-12/schema",
	"type": "object",
	"required": ["amount_cents", "customer_id"],
	"properties": {
		"amount_cents": {"type": "integer", "minimum": 1},
		"customer_id": {"type": "string", "minLength": 1}
	}
}`

// ChargeResult is the result of charge.
type ChargeResult struct {
	ChargeID string `json:"charge_id"`
}

// Workflows are the example workflows Register registers, for a
// deployment's configuration to declare (workflows.<name>).
func Workflows() []string {
	return []string{WorkflowOnboarding, WorkflowCharge, WorkflowCollect, WorkflowSleep, WorkflowDigest, WorkflowFanout, WorkflowTally, WorkflowCheckout, WorkflowCheckoutBatch}
}

// Register registers the example workflows and activities on w.
func Register(w *harvest.Worker, svc *Services) {
	RegisterOnly(w, svc, nil)
}

// registrar registers on w what keep keeps (everything when keep is nil).
type registrar struct {
	w    *harvest.Worker
	keep func(name string) bool
}

func (r registrar) has(name string) bool { return r.keep == nil || r.keep(name) }

func workflow[In, Out any](r registrar, name string, fn func(*harvest.WorkflowContext, In) (Out, error), opts ...harvest.WorkflowOptions) {
	if r.has(name) {
		harvest.RegisterWorkflow(r.w, name, fn, opts...)
	}
}

func activity[In, Out any](r registrar, name string, fn func(*harvest.ActivityContext, In) (Out, error), opts ...harvest.ActivityOptions) {
	if r.has(name) {
		harvest.RegisterActivity(r.w, name, fn, opts...)
	}
}

// RegisterOnly registers on w the example workflows and activities keep
// keeps, by name (all of them when keep is nil): a fleet of workers that
// each serve some of them, as a deployment's services would.
func RegisterOnly(w *harvest.Worker, svc *Services, keep func(name string) bool) {
	r := registrar{w: w, keep: keep}
	workflow(r, WorkflowOnboarding, Onboarding)
	workflow(r, WorkflowCharge, ChargeWorkflow, harvest.WorkflowOptions{InputSchema: []byte(ChargeInputSchema)})
	workflow(r, WorkflowCollect, Collect, harvest.WorkflowOptions{InputSchema: []byte(CollectInputSchema)})
	workflow(r, WorkflowSleep, SleepWorkflow)
	workflow(r, WorkflowDigest, Digest)
	workflow(r, WorkflowTally, Tally)
	registerBench(r, svc.Bench)
	registerFanout(r)
	registerCheckout(r)
	workflow(r, WorkflowCheckoutBatch, CheckoutBatch)

	quick := harvest.ActivityOptions{StartToClose: 10 * time.Second}
	activity(r, ActivityCreateDBUser, func(ctx *harvest.ActivityContext, in OnboardingInput) (string, error) {
		key := ctx.IdempotencyKey().Subkey("db")
		return svc.Users.Do(key.String(), fmt.Sprintf("db-user-%d", in.UserID)), nil
	}, quick)
	activity(r, ActivitySendWelcome, func(ctx *harvest.ActivityContext, in OnboardingInput) (string, error) {
		key := ctx.IdempotencyKey().Subkey("email")
		return svc.Mail.Do(key.String(), fmt.Sprintf("welcome-%d-%s", in.UserID, key)), nil
	}, quick)
	if !r.has(ActivityChargeCard) {
		return
	}
	harvest.RegisterActivity(w, ActivityChargeCard, func(ctx *harvest.ActivityContext, in ChargeInput) (ChargeResult, error) {
		// The activity's key is the provider's Idempotency-Key: every
		// attempt of this invocation asks for the same charge.
		c, err := svc.PaymentsAPI.CreateCharge(ctx, ctx.IdempotencyKey().String(), in.AmountCents, in.CustomerID)
		switch {
		case errors.Is(err, fakepay.ErrDeclined):
			return ChargeResult{}, harvest.NewNonRetryableError("CardDeclined", "%v", err)
		case errors.Is(err, fakepay.ErrInvalidRequest) || errors.Is(err, fakepay.ErrKeyReused):
			return ChargeResult{}, harvest.NonRetryable(err)
		case err != nil:
			return ChargeResult{}, err
		}
		return ChargeResult{ChargeID: c.ID}, nil
	}, harvest.ActivityOptions{StartToClose: 10 * time.Second, RetryPolicy: harvest.RetryExponential(5, 2*time.Second)})
	// When an attempt's outcome is unknown, look the charge up by key
	// before charging again.
	harvest.RegisterReconcile(w, ActivityChargeCard, func(ctx *harvest.ActivityContext, _ ChargeInput) (ChargeResult, bool, error) {
		c, found, err := svc.PaymentsAPI.FindCharge(ctx, ctx.IdempotencyKey().String())
		return ChargeResult{ChargeID: c.ID}, found, err
	})
}

// Onboarding creates the user's database record, then sends the welcome
// email.
func Onboarding(ctx *harvest.WorkflowContext, in OnboardingInput) (OnboardingResult, error) {
	out := OnboardingResult{UserID: in.UserID}
	if err := harvest.ExecuteActivity(ctx, ActivityCreateDBUser, in).Get(&out.DBUser); err != nil {
		return out, err
	}
	if err := harvest.ExecuteActivity(ctx, ActivitySendWelcome, in).Get(&out.EmailRef); err != nil {
		return out, err
	}
	return out, nil
}

// ChargeWorkflow charges a card once.
func ChargeWorkflow(ctx *harvest.WorkflowContext, in ChargeInput) (ChargeResult, error) {
	var out ChargeResult
	err := harvest.ExecuteActivity(ctx, ActivityChargeCard, in).Get(&out)
	return out, err
}

// ItemSignal is the signal collect waits for.
var ItemSignal = harvest.NewSignal[json.RawMessage]("item")

// CollectInput is the input of collect.
type CollectInput struct {
	Count int `json:"count"`
}

// CollectInputSchema is the JSON Schema of collect's input.
const CollectInputSchema = `{
	"type": "object",
	"required": ["count"],
	"properties": {"count": {"type": "integer", "minimum": 0, "maximum": 10000}}
}`

// CollectResult is the result of collect.
type CollectResult struct {
	Items []json.RawMessage `json:"items"`
}

// Collect waits for Count signals named "item" and returns their payloads
// in the order received.
func Collect(ctx *harvest.WorkflowContext, in CollectInput) (CollectResult, error) {
	out := CollectResult{Items: []json.RawMessage{}}
	for range in.Count {
		item, err := ItemSignal.Receive(ctx)
		if err != nil {
			return out, err
		}
		out.Items = append(out.Items, item)
	}
	return out, nil
}

// SleepInput is the input of sleep.
type SleepInput struct {
	// Duration is a Go duration, such as "1s".
	Duration string `json:"duration"`
}

// SleepWorkflow sleeps on a durable timer and returns.
func SleepWorkflow(ctx *harvest.WorkflowContext, in SleepInput) (SleepInput, error) {
	d, err := time.ParseDuration(in.Duration)
	if err != nil {
		return in, fmt.Errorf("duration %q: %w", in.Duration, err)
	}
	if err := harvest.Sleep(ctx, d); err != nil {
		return in, err
	}
	return in, nil
}

// DigestResult is the result of digest.
type DigestResult struct {
	Count int               `json:"count"`
	Items []json.RawMessage `json:"items"`
}

// Digest takes a list of inputs, as a batch start policy makes of the
// starts it collects (docs/start-policies.md), or a single input, which
// it counts as a list of one; it returns how many there were, and them.
func Digest(_ *harvest.WorkflowContext, input json.RawMessage) (DigestResult, error) {
	items := []json.RawMessage{}
	if trimmed := bytes.TrimSpace(input); len(trimmed) > 0 && trimmed[0] == '[' {
		if err := json.Unmarshal(trimmed, &items); err != nil {
			return DigestResult{}, harvest.NewNonRetryableError("invalid_input", "digest: %v", err)
		}
	} else if len(trimmed) > 0 {
		items = append(items, json.RawMessage(trimmed))
	}
	return DigestResult{Count: len(items), Items: items}, nil
}
