package fakepay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// API is what the charge_card activity needs from a payment provider: the
// in-process Provider, or a Client of one served over HTTP.
type API interface {
	CreateCharge(ctx context.Context, idempotencyKey string, amountCents int64, customerID string) (Charge, error)
	FindCharge(ctx context.Context, idempotencyKey string) (Charge, bool, error)
}

// NewHandler serves p over HTTP, the way a provider's API would:
// POST /v1/charges with an Idempotency-Key header and a JSON body
// {"amount_cents", "customer_id"}; GET /v1/charges/by-key/{key}.
func NewHandler(p *Provider) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			AmountCents int64  `json:"amount_cents"`
			CustomerID  string `json:"customer_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeErr(w, http.StatusBadRequest, "invalid_request", err.Error())
			return
		}
		c, err := p.CreateCharge(r.Context(), r.Header.Get("Idempotency-Key"), req.AmountCents, req.CustomerID)
		switch {
		case errors.Is(err, ErrDeclined):
			writeErr(w, http.StatusPaymentRequired, "card_declined", err.Error())
		case errors.Is(err, ErrKeyReused):
			writeErr(w, http.StatusConflict, "idempotency_error", err.Error())
		case errors.Is(err, ErrInvalidRequest):
			writeErr(w, http.StatusBadRequest, "invalid_request", err.Error())
		case err != nil:
			writeErr(w, http.StatusInternalServerError, "api_error", err.Error())
		default:
			_ = json.NewEncoder(w).Encode(c)
		}
	})
	mux.HandleFunc("GET /v1/charges/by-key/{key}", func(w http.ResponseWriter, r *http.Request) {
		c, ok, _ := p.FindCharge(r.Context(), r.PathValue("key"))
		if !ok {
			writeErr(w, http.StatusNotFound, "resource_missing", "no charge with that idempotency key")
			return
		}
		_ = json.NewEncoder(w).Encode(c)
	})
	return mux
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": msg})
}

// Client calls a provider served by NewHandler.
type Client struct {
	base string
	http *http.Client
}

// NewClient returns a client of the provider at baseURL.
func NewClient(baseURL string) *Client {
	return &Client{base: baseURL, http: &http.Client{Timeout: 30 * time.Second}}
}

// CreateCharge charges once per idempotency key.
func (c *Client) CreateCharge(ctx context.Context, idempotencyKey string, amountCents int64, customerID string) (Charge, error) {
	body, _ := json.Marshal(map[string]any{"amount_cents": amountCents, "customer_id": customerID})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return Charge{}, err
	}
	req.Header.Set("Idempotency-Key", idempotencyKey)
	req.Header.Set("Content-Type", "application/json")
	return c.do(req)
}

// FindCharge looks a charge up by the idempotency key that created it.
func (c *Client) FindCharge(ctx context.Context, idempotencyKey string) (Charge, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/charges/by-key/"+url.PathEscape(idempotencyKey), nil)
	if err != nil {
		return Charge{}, false, err
	}
	ch, err := c.do(req)
	var nf *notFound
	if errors.As(err, &nf) {
		return Charge{}, false, nil
	}
	return ch, err == nil, err
}

type notFound struct{ msg string }

func (e *notFound) Error() string { return e.msg }

func (c *Client) do(req *http.Request) (Charge, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return Charge{}, fmt.Errorf("payment provider: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		var ch Charge
		if err := json.NewDecoder(resp.Body).Decode(&ch); err != nil {
			return Charge{}, fmt.Errorf("payment provider: %w", err)
		}
		return ch, nil
	}
	var e struct {
		Message string `json:"message"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	switch resp.StatusCode {
	case http.StatusPaymentRequired:
		return Charge{}, fmt.Errorf("%w: %s", ErrDeclined, e.Message)
	case http.StatusConflict:
		return Charge{}, fmt.Errorf("%w: %s", ErrKeyReused, e.Message)
	case http.StatusBadRequest:
		return Charge{}, fmt.Errorf("%w: %s", ErrInvalidRequest, e.Message)
	case http.StatusNotFound:
		return Charge{}, &notFound{e.Message}
	}
	return Charge{}, fmt.Errorf("payment provider: %s: %s", resp.Status, e.Message)
}
