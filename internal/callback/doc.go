// Package callback delivers completion callbacks: an http(s) URL a client
// supplies when it starts a workflow, to which Harvest POSTs the outcome once
// the execution closes.
//
// Callback URLs are chosen by clients, so every request Harvest makes on
// their behalf is a potential server-side request forgery. The package
// therefore checks targets twice:
//
//   - Policy.Validate runs when the workflow is started. It accepts only
//     http and https URLs with a host, no userinfo and an optional port, and
//     resolves the host: every address must be publicly routable (see
//     Policy for the exact rules) unless the operator allow-listed the host
//     name or a CIDR containing the address. A cloud metadata address is
//     allowed only by an entry naming exactly it, whatever name leads to it.
//   - Client.Deliver re-applies the same rules at connect time. Its dialer
//     resolves the host itself (an allow-listed name too), checks every
//     address, and dials only the checked addresses (a net.Dialer Control
//     hook checks the socket address once more), so a DNS answer that
//     changes between validation and delivery (DNS rebinding) cannot reach
//     an internal service or the metadata endpoint. Proxies from the
//     environment are never used, because a proxy would do the connecting
//     on Harvest's behalf.
//
// Whoever chose the URL reads why it was refused (the start's answer) or
// why a delivery failed (its last_error): RejectedError.Reason and
// DeliveryError.Reason say it by category ("private address", "name does
// not resolve", "connection refused"), never with an address the resolver
// answered or Go's error text, which the errors' Error keeps for the log.
//
// Redirects are never followed: a webhook receiver has no reason to
// redirect, a 301/302/303 would silently turn the POST into a GET, and every
// hop would be another chance to reach a forbidden target. A 3xx response is
// reported as a non-retryable *DeliveryError wrapping ErrRejected.
//
// Each delivery carries a Harvest-Delivery-Id header that stays the same
// across retries, so receivers can deduplicate. RetryDelay and
// DefaultMaxAttempts give the retry schedule; the caller (the scheduler)
// owns the retry loop and persistence: this package must not touch
// PostgreSQL or NATS.
package callback
