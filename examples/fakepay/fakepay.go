package fakepay

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"
)

// ErrKeyReused is returned when an idempotency key is reused with
// different parameters.
var ErrKeyReused = errors.New("idempotency key reused with different parameters")

// DeclinedCustomer is a customer whose card is always declined, as a
// provider's test card would be.
const DeclinedCustomer = "cus_declined"

// ErrDeclined is returned when the card is declined.
var ErrDeclined = errors.New("card declined")

// ErrInvalidRequest is returned for a request no retry can fix.
var ErrInvalidRequest = errors.New("invalid charge request")

// Charge is a created charge.
type Charge struct {
	ID          string `json:"id"`
	AmountCents int64  `json:"amount_cents"`
	CustomerID  string `json:"customer_id"`
}

// Provider keeps charges in memory. Safe for concurrent use.
type Provider struct {
	mu       sync.Mutex
	byKey    map[string]Charge
	requests int
	// AfterCharge, if set, runs after a new charge is recorded and before
	// CreateCharge returns it: tests use it to stop a worker between the
	// provider accepting a charge and Harvest hearing of it.
	AfterCharge func(c Charge)
}

// New returns an empty provider.
func New() *Provider { return &Provider{byKey: map[string]Charge{}} }

// CreateCharge charges customerID amountCents, once per idempotency key.
func (p *Provider) CreateCharge(ctx context.Context, idempotencyKey string, amountCents int64, customerID string) (Charge, error) {
	if err := ctx.Err(); err != nil {
		return Charge{}, err
	}
	if idempotencyKey == "" {
		return Charge{}, fmt.Errorf("%w: an Idempotency-Key is required", ErrInvalidRequest)
	}
	if amountCents <= 0 || customerID == "" {
		return Charge{}, fmt.Errorf("%w: amount_cents must be positive and customer_id set", ErrInvalidRequest)
	}
	if customerID == DeclinedCustomer {
		return Charge{}, fmt.Errorf("customer %s: %w", customerID, ErrDeclined)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	if c, ok := p.byKey[idempotencyKey]; ok {
		if c.AmountCents != amountCents || c.CustomerID != customerID {
			return Charge{}, fmt.Errorf("key %q: %w", idempotencyKey, ErrKeyReused)
		}
		return c, nil
	}
	c := Charge{ID: "ch_" + uuid.NewString()[:18], AmountCents: amountCents, CustomerID: customerID}
	p.byKey[idempotencyKey] = c
	if after := p.AfterCharge; after != nil {
		p.mu.Unlock()
		after(c)
		p.mu.Lock()
	}
	return c, nil
}

// FindCharge looks a charge up by the idempotency key that created it.
func (p *Provider) FindCharge(_ context.Context, idempotencyKey string) (Charge, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.byKey[idempotencyKey]
	return c, ok, nil
}

// Charges is the number of distinct charges made.
func (p *Provider) Charges() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byKey)
}

// Requests is the number of charge requests received, repeats included.
func (p *Provider) Requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests
}
