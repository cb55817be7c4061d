package storable_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/poison"
	"github.com/harvest-engine/harvest/internal/wire"
)

// The property these tests hold CheckJSON and CheckText to, against a
// real PostgreSQL: whatever they accept, PostgreSQL stores, by every road
// Harvest's store takes (a jsonb parameter, text cast to jsonb, an insert
// into a jsonb column, an element of a jsonb[] parameter); whatever they
// refuse, PostgreSQL refuses too, with a data exception, except documents
// that nest deeper than MaxDepth or whose numbers grow too much written
// out, which PostgreSQL may still take.

// jsonbRoads are the ways a document reaches a jsonb value.
var jsonbRoads = []struct {
	name string
	sql  string
	arg  func(doc []byte) any
}{
	{"jsonb parameter", `SELECT $1::jsonb IS NOT NULL`, func(doc []byte) any { return string(doc) }},
	{"text cast to jsonb", `SELECT $1::text::jsonb IS NOT NULL`, func(doc []byte) any { return string(doc) }},
	{"insert into a jsonb column", `INSERT INTO storable_probe (v) VALUES ($1)`, func(doc []byte) any { return json.RawMessage(doc) }},
	{"jsonb[] element", `SELECT count(*) FROM unnest($1::jsonb[])`, func(doc []byte) any { return []json.RawMessage{doc} }},
}

func probeDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	db := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := db.Exec(ctx, `CREATE TABLE storable_probe (v jsonb, t text)`)
	require.NoError(t, err)
	return db
}

// agreeJSON fails t unless CheckJSON's verdict on doc is PostgreSQL's.
func agreeJSON(t *testing.T, db *pgxpool.Pool, doc []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	verdict := storable.CheckJSON(doc)
	var se *storable.Error
	if verdict != nil {
		require.True(t, errors.As(verdict, &se), "CheckJSON returned %T", verdict)
		if se.Problem == storable.ProblemDepth || se.Problem == storable.ProblemNumberGrowth {
			return // PostgreSQL takes these; Harvest could not carry them
		}
	}
	for _, road := range jsonbRoads {
		_, err := db.Exec(ctx, road.sql, road.arg(doc))
		if verdict == nil {
			require.NoError(t, err, "CheckJSON accepts %s, PostgreSQL refuses it (%s)", show(doc), road.name)
			continue
		}
		require.Error(t, err, "CheckJSON refuses %s (%v), PostgreSQL takes it (%s)", show(doc), verdict, road.name)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "not a PostgreSQL error: %v", err)
		require.True(t, strings.HasPrefix(pgErr.Code, "22") || pgErr.Code == "54001",
			"PostgreSQL refuses %s with %s %s (%s), not a data exception", show(doc), pgErr.Code, pgErr.Message, road.name)
	}
	if verdict == nil {
		// What is stored comes back bounded: separators gain a space,
		// numbers are written out in full.
		var back int
		require.NoError(t, db.QueryRow(ctx, `SELECT octet_length($1::jsonb::text)`, string(doc)).Scan(&back))
		require.LessOrEqual(t, back, 2*len(doc)+storable.MaxNumberGrowth, "%s comes back as %d bytes", show(doc), back)
		// The road a start's input takes: inside a command on the
		// command stream, then into the scheduler's batch.
		data, err := json.Marshal(wire.Command{CommandID: "c", Kind: wire.KindStart, Start: &wire.StartCommand{Input: doc}})
		require.NoError(t, err)
		var cmd wire.Command
		require.NoError(t, json.Unmarshal(data, &cmd))
		_, err = db.Exec(ctx, `SELECT count(*) FROM unnest($1::jsonb[])`, []json.RawMessage{cmd.Start.Input})
		require.NoError(t, err, "%s, carried in a command, is refused", show(doc))
	}
}

// agreeText fails t unless CheckText's verdict on s is PostgreSQL's.
func agreeText(t *testing.T, db *pgxpool.Pool, s string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	verdict := storable.CheckText(s)
	for _, q := range []string{`SELECT $1::text IS NOT NULL`, `INSERT INTO storable_probe (t) VALUES ($1)`, `SELECT count(*) FROM unnest($1::text[])`} {
		var arg any = s
		if strings.Contains(q, "[]") {
			arg = []string{s}
		}
		_, err := db.Exec(ctx, q, arg)
		if verdict == nil {
			require.NoError(t, err, "CheckText accepts %q, PostgreSQL refuses it", s)
			continue
		}
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "CheckText refuses %q (%v), PostgreSQL: %v", s, verdict, err)
		require.True(t, strings.HasPrefix(pgErr.Code, "22"), "PostgreSQL refuses %q with %s", s, pgErr.Code)
	}
	if verdict == nil {
		require.NoError(t, storable.CheckJSON(must(json.Marshal(s))), "a storable text, as JSON")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func show(doc []byte) string {
	if len(doc) > 120 {
		return fmt.Sprintf("%q… (%d bytes)", doc[:120], len(doc))
	}
	return strconv.Quote(string(doc))
}

// jsonSeeds are the fuzz targets' seed corpus and the boundary cases the
// tests check PostgreSQL's verdict on.
var jsonSeeds = []string{
	`{"a": [1, "x", true, false, null, {"b": {}}], "c": -0.5e-3}`,
	`"\" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00 \uFFFF \u0001"`,
	`{"naïve": "日本 😀"}`,
	`"\u0000"`, `{"a\u0000": 1}`, "\"\x00\"", "\x00",
	`"\ud800"`, `"\ud800x"`, `"\ud800\ud800"`, `"\udc00"`, `"\udc00\ud800"`, `{"\udbff": 1}`, `"\ud800\u0041"`,
	"\"\xff\"", "\"\xed\xa0\x80\"", "\"\xc0\xaf\"", "\"\xf4\x90\x80\x80\"", "\"\xe6\x97\"", "\xef\xbb\xbf{}",
	`1e1000000`, `0e1073741822`, `0e1073741823`, `0e-1073741822`, `-0`, `1E+2`, `1.0`,
	`9.99e131071`, `1e131072`, `0.001e131074`, `0.001e131075`,
	`1e-16383`, `1.0e-16383`, `10e-16384`, `0.0e-16383`, `0.0e-16382`, `1e0000000000000000000000000000005`,
	`1e99999999999999999999999`, `-1e-99999999999999999999999`,
	"1." + strings.Repeat("0", 16383), "1." + strings.Repeat("0", 16384),
	strings.Repeat("9", 131072), "1" + strings.Repeat("0", 131072),
	strings.Repeat("[", storable.MaxDepth) + strings.Repeat("]", storable.MaxDepth),
	strings.Repeat(`{"a":`, storable.MaxDepth) + "1" + strings.Repeat("}", storable.MaxDepth),
	strings.Repeat("[", 20000) + strings.Repeat("]", 20000),
	``, ` `, `01`, `[1,]`, `1 2`, "\"\x01\"", `"\x"`, `"\u12"`, `{"a": "b`, `{"a" 1}`, `{1: 2}`, `tru`, `nul`, `.5`, `+1`, `1.`, `1e`, `-`,
	"\v1", "\f1", " \t\r\n1\n",
}

func TestCheckJSONAgreesWithPostgreSQLOnBoundaries(t *testing.T) {
	t.Parallel()
	db := probeDB(t)
	for _, doc := range jsonSeeds {
		agreeJSON(t, db, []byte(doc))
	}
}

// TestCheckJSONAgreesWithPostgreSQLOnGeneratedDocuments checks generated
// documents that mix every hazard (seeded: a failure names its seed).
func TestCheckJSONAgreesWithPostgreSQLOnGeneratedDocuments(t *testing.T) {
	t.Parallel()
	db := probeDB(t)
	const seed, n = 20260512, 600
	rng := rand.New(rand.NewPCG(seed, 0))
	refused := map[string]int{}
	for i := range n {
		doc := poison.Document(rng)
		t.Run(strconv.Itoa(i), func(t *testing.T) { agreeJSON(t, db, doc) })
		var se *storable.Error
		if errors.As(storable.CheckJSON(doc), &se) {
			refused[se.Problem]++
		} else {
			refused["accepted"]++
		}
	}
	t.Logf("seed %d: %v", seed, refused)
	for i := range 100 {
		doc := poison.Unstorable(rng)
		require.Error(t, storable.CheckJSON(doc), "poison.Unstorable made %s", show(doc))
		t.Run("unstorable-"+strconv.Itoa(i), func(t *testing.T) { agreeJSON(t, db, doc) })
	}
	// The generator reaches every verdict.
	for _, p := range []string{"accepted", storable.ProblemNUL, storable.ProblemInvalidUTF8, storable.ProblemSurrogate,
		storable.ProblemNumber, storable.ProblemNumberGrowth, storable.ProblemDepth, storable.ProblemSyntax} {
		require.NotZero(t, refused[p], "no generated document gets %s", p)
	}
}

func TestCheckTextAgreesWithPostgreSQL(t *testing.T) {
	t.Parallel()
	db := probeDB(t)
	rng := rand.New(rand.NewPCG(7, 7))
	for _, s := range textSeeds {
		agreeText(t, db, s)
	}
	for range 300 {
		agreeText(t, db, poison.Text(rng))
	}
}

var textSeeds = []string{"", "order-42", "naïve 日本 😀", "a\x00b", "a\xffb", "\xed\xa0\x80", "\xe6\x97", "tab\there\n", "\x7f\u0085", "\uFFFE\uFFFF"}

// FuzzCheckJSON holds CheckJSON to PostgreSQL's verdict on arbitrary
// bytes. Run it with
//
//	go test -run '^$' -fuzz FuzzCheckJSON -parallel 1 -fuzzminimizetime 5s ./internal/storable/
//
// Each fuzz worker starts a PostgreSQL of its own, unless
// HARVEST_TEST_DATABASE_URL names one (see internal/testing/pgtest).
func FuzzCheckJSON(f *testing.F) {
	for _, doc := range jsonSeeds {
		f.Add([]byte(doc))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 40 {
		f.Add(poison.Document(rng))
	}
	db := probeDB(f)
	f.Fuzz(func(t *testing.T, doc []byte) { agreeJSON(t, db, doc) })
}

// FuzzCheckText holds CheckText to PostgreSQL's verdict on text.
func FuzzCheckText(f *testing.F) {
	for _, s := range textSeeds {
		f.Add(s)
	}
	db := probeDB(f)
	f.Fuzz(func(t *testing.T, s string) { agreeText(t, db, s) })
}

func BenchmarkCheckJSON(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 3))
	var items []string
	for i, size := 0, 0; size < 1<<20-200; i++ {
		items = append(items, fmt.Sprintf(`{"id": %d, "name": "item %d, naïve 日本", "price": %d.%02d, "tags": ["a", "b\n"], "ok": true}`,
			i, i, rng.IntN(1000), rng.IntN(100)))
		size += len(items[i]) + 1
	}
	for _, bc := range []struct {
		name string
		doc  []byte
	}{
		{"small", []byte(`{"input": {"user_id": 42, "email": "a@example.com"}, "workflow_id": "order-42"}`)},
		{"1MiB-objects", []byte("[" + strings.Join(items, ",") + "]")},
		{"1MiB-string", []byte(`"` + strings.Repeat("abcdefgh", 1<<17-1) + `"`)},
		{"1MiB-unicode", []byte(`"` + strings.Repeat("日本語", 1<<16-1) + `"`)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.doc)))
			b.ReportAllocs()
			for b.Loop() {
				if err := storable.CheckJSON(bc.doc); err != nil {
					b.Fatal(err)
				}
			}
		})
		// For scale: encoding/json's own validation of the same bytes.
		b.Run(bc.name+"/json.Valid", func(b *testing.B) {
			b.SetBytes(int64(len(bc.doc)))
			for b.Loop() {
				if !json.Valid(bc.doc) {
					b.Fatal("not valid")
				}
			}
		})
	}
}
