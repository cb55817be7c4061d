// Package storable decides what Harvest can store, so that ingest refuses
// the rest before it publishes anything: a command that PostgreSQL refuses
// to store would stop its shard.
//
// Payloads (inputs, signal payloads, webhook and message bodies) are
// stored as PostgreSQL jsonb. [CheckJSON] accepts exactly the JSON text
// that PostgreSQL 15's jsonb accepts, less two kinds of documents that it
// takes but Harvest could not carry (nested too deep, or numbers that grow
// too much written out). It refuses:
//
//   - bytes that are not UTF-8, anywhere (PostgreSQL: invalid byte
//     sequence for encoding "UTF8");
//   - U+0000 in a string or a member name, escaped as \u0000 or raw
//     (unsupported Unicode escape sequence; a raw 0x00 is an invalid
//     byte sequence);
//   - a \u escape of a UTF-16 surrogate that is not a high one followed
//     by a low one: a lone high, a lone low, or a pair in reverse order
//     (invalid input syntax for type json);
//   - numbers outside the range of PostgreSQL's numeric (value overflows
//     numeric format): an exponent of magnitude 1073741823 (INT_MAX/2) or
//     more; more than 16383 digits after the decimal point, counted in
//     the text as written (digits after the point, minus the exponent,
//     trailing zeros included, even for zero); a first significant digit
//     more than 131071 places before the point (131072 digits before it);
//   - numbers that, written out in full as PostgreSQL returns them (1e3 as
//     1000), would make the document more than MaxNumberGrowth bytes
//     longer: PostgreSQL takes them, but reading them back, and sending
//     them to workers, would not work;
//   - arrays and objects nested more than MaxDepth deep, counted from the
//     top of the document (PostgreSQL's own limit is its stack: about
//     15000 levels with the default max_stack_depth of 2MB, between 600
//     and 700 with the smallest, 100kB; Go's encoding/json, which decodes
//     commands and tasks that carry payloads, stops at 10000);
//   - and whatever is not JSON (RFC 8259).
//
// What jsonb stores is the value, not the text: white space, the order of
// members, all but the last of duplicate member names, escapes (\/ is /)
// and the spelling of numbers (1E+2 is 100, -0 is 0; 1.0 stays 1.0) are
// not kept.
//
// Identifiers (workflow ids, idempotency keys, event ids) are stored as
// text. [CheckText] refuses what a PostgreSQL text column refuses (U+0000
// and bytes that are not UTF-8); [CheckIdentifier] also refuses control
// characters (Unicode category Cc: U+0000 to U+001F, U+007F to U+009F),
// which PostgreSQL would store but which make an identifier ambiguous in
// logs, headers and URLs.
//
// Every function here is a pure function of its input, safe for concurrent
// use, and reads its input in one pass without allocating unless it
// refuses it.
//
// It is a leaf of pure functions; internal/store's tests check it against
// a real PostgreSQL.
package storable
