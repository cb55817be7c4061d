package console

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/wire"
)

// A running execution's Signal… is a form (GET …/signal): the signal's
// name (the names its history received offered), its payload as JSON
// and an optional idempotency key. Posted (POST …/signal), it is sent
// by POST /api/harvest/executions/{id}/signals/{name}, as the CLI sends
// it, and leads back to the execution, which says what became of it; a
// refusal of the API, or a payload that is not JSON, is shown on the
// form with what was typed.

// signalForm is the Signal… form's values.
type signalForm struct {
	Name, Payload, Key string
}

// signalFormOf reads the form from v.
func signalFormOf(v url.Values) signalForm {
	return signalForm{Name: strings.TrimSpace(v.Get("name")), Payload: strings.TrimSpace(v.Get("payload")), Key: strings.TrimSpace(v.Get("idempotency_key"))}
}

// formRefusal is what a form's page shows when its action was refused:
// by the API (Status and Code), or by the console before it asked (no
// Code).
type formRefusal struct {
	Status  int
	Code    string
	Message string
	// Violations are how an input fails its workflow's schema.
	Violations []api.Violation
}

// refusalOf turns an API answer that refuses what a form asked into what
// the form shows; ok is false for any other error (401, 403 and 5xx are
// the page's, as apiProblem shows them).
func refusalOf(err error) (*formRefusal, bool) {
	var apiErr *apiError
	if !errors.As(err, &apiErr) || apiErr.status < 400 || apiErr.status > 499 ||
		apiErr.status == http.StatusUnauthorized || apiErr.status == http.StatusForbidden {
		return nil, false
	}
	msg := apiErr.body.Message
	if f := apiErr.body.Field; f != "" && !strings.Contains(msg, f) {
		msg += " (" + f + ")"
	}
	return &formRefusal{Status: apiErr.status, Code: apiErr.body.Error, Message: msg, Violations: apiErr.body.Violations}, true
}

// jsonOf reads a form's JSON field: nil when blank, else the JSON
// document, or what is wrong with it.
func jsonOf(what, text string) (json.RawMessage, string) {
	if text == "" {
		return nil, ""
	}
	if !json.Valid([]byte(text)) {
		return nil, what + " is not JSON: give one JSON value, such as {\"sku\": \"A-1\"}, or leave it empty."
	}
	return json.RawMessage(text), ""
}

type signalData struct {
	E    api.Execution
	Form signalForm
	// Names are the signal names its history received, for the form's
	// datalist.
	Names   []string
	Refusal *formRefusal
}

// signalPage reads what the Signal… page of execution id shows.
func (c *Console) signalPage(r *http.Request, id string, f signalForm) (*signalData, error) {
	ctx := r.Context()
	a := c.apiFor(r)
	d := &signalData{Form: f}
	path := "/api/harvest/executions/" + url.PathEscape(id)
	if err := a.call(ctx, http.MethodGet, path, nil, nil, &d.E); err != nil {
		return nil, err
	}
	var hist api.HistoryResponse
	if err := a.call(ctx, http.MethodGet, path+"/history", nil, nil, &hist); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, e := range hist.Events {
		var at wire.SignalReceivedAttrs
		if e.Type == wire.EventSignalReceived && json.Unmarshal(e.Raw, &at) == nil && !seen[at.SignalName] {
			seen[at.SignalName] = true
			d.Names = append(d.Names, at.SignalName)
		}
	}
	return d, nil
}

// handleSignalForm is the execution's Signal… page.
func (c *Console) handleSignalForm(w http.ResponseWriter, r *http.Request) {
	d, err := c.signalPage(r, r.PathValue("id"), signalFormOf(r.URL.Query()))
	if err != nil {
		c.apiProblem(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "signal", "Signal execution", d)
}

// handleSignal sends the form's signal and goes back to the execution; a
// refusal is shown on the form.
func (c *Console) handleSignal(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		c.problem(w, r, http.StatusBadRequest, "Bad form", "The form could not be read.")
		return
	}
	id := r.PathValue("id")
	f := signalFormOf(r.PostForm)
	refusal := func(ref *formRefusal) {
		d, err := c.signalPage(r, id, f)
		if err != nil {
			c.apiProblem(w, r, err)
			return
		}
		d.Refusal = ref
		c.render(w, r, ref.Status, "signal", "Signal execution", d)
	}
	if f.Name == "" {
		refusal(&formRefusal{Status: http.StatusBadRequest, Message: "Give the signal's name."})
		return
	}
	payload, bad := jsonOf("The payload", f.Payload)
	if bad != "" {
		refusal(&formRefusal{Status: http.StatusBadRequest, Message: bad})
		return
	}
	var q url.Values
	if f.Key != "" {
		q = url.Values{"idempotency_key": {f.Key}}
	}
	var body any
	if payload != nil {
		body = payload
	}
	var done api.SignalResponse
	path := "/api/harvest/executions/" + url.PathEscape(id) + "/signals/" + url.PathEscape(f.Name)
	if err := c.apiFor(r).call(r.Context(), http.MethodPost, path, q, body, &done); err != nil {
		if ref, ok := refusalOf(err); ok {
			refusal(ref)
			return
		}
		c.apiProblem(w, r, err)
		return
	}
	result := "signal"
	switch {
	case done.SignalDelivered == nil:
		result = "signal-accepted"
	case !*done.SignalDelivered:
		result = "signal-again"
	}
	logattr.With(c.cfg.Logger, id, "", done.CommandID).Info("console: signal sent", "signal", f.Name, "idempotency_key", f.Key, "result", result)
	http.Redirect(w, r, "/ui/executions/"+url.PathEscape(id)+"?done="+result, http.StatusSeeOther)
}
