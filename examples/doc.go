// Package examples holds the example workflows that cmd/worker and
// `harvest dev` run: onboarding, which makes two outbound calls each under
// its own subkey, and charge, which charges a card through a fake payment
// provider that honours idempotency keys.
//
// The examples use only the public packages (the root package and its
// types), as users' own code would; they must not import internal/.
package examples
