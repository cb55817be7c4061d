// Package poison generates the JSON documents and texts that tests throw at
// Harvest's edges: mostly JSON, mixing everything PostgreSQL refuses to
// store (U+0000, unpaired surrogates, bytes that are not UTF-8, numbers
// beyond numeric's range, deep nesting) with what it takes. Generation is
// driven by a caller's seeded *rand.Rand, so a failure reproduces from its
// seed. It is a test harness: production code must not import it.
package poison
