// Package pgtest gives tests their own PostgreSQL database with the Harvest
// schema already migrated. It is a test harness: production code must not
// import it.
//
// A test package opts in from its TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and each test then calls [NewDatabase] or [NewPool]. The first such call
// in the test process starts a private, non-durable PostgreSQL with
// [pglocal] in a temporary directory, with a random password that the URLs
// it returns carry (or, when HARVEST_TEST_DATABASE_URL is set, uses that
// server instead), and migrates a template database once; every test
// database is a copy of that template, which takes milliseconds.
// Main stops the server and removes its directory, PostgreSQL's data
// included, when the tests end; a process killed before (a test timeout)
// leaves its directory to the next test process, which removes it.
//
// When PostgreSQL is not installed and HARVEST_TEST_DATABASE_URL is unset,
// tests that ask for a database fail with [pglocal.ErrNotInstalled]'s
// message; they do not skip.
//
// Set HARVEST_TEST_PG_LOG=1 to see PostgreSQL's output on stderr.
package pgtest
