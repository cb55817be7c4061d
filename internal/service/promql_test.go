package service_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A PromQL expression's metric names, for checking a dashboard's queries
// against what the processes serve. A small reader of the expression
// language rather than Prometheus's parser, whose module brings most of
// Prometheus with it: it skips strings, label matchers ({...}) and range
// or subquery durations ([...]), takes an identifier followed by "(" for a
// function or an aggregation, reads the label lists of by, without, on,
// ignoring, group_left and group_right as labels, and every other
// identifier as a metric name. Grafana's variables ($__rate_interval,
// ${datasource}) are skipped.

type promToken struct {
	kind byte // 'i' identifier, 'p' punctuation, 'n' number, 's' string, 'v' variable, '{' matchers, '[' range
	text string
}

// promKeywords are the identifiers of PromQL's grammar that are neither
// functions nor metrics.
var promKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
	"inf": true, "nan": true,
}

// promLabelLists are the keywords followed by a parenthesized list of
// label names.
var promLabelLists = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentPart(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

// skipQuoted returns the index after the string literal opening at i.
func skipQuoted(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at %d", i)
}

// skipBracketed returns the index after the bracket opening at i,
// closing brackets of its kind, strings inside skipped.
func skipBracketed(s string, i int) (int, error) {
	open := s[i]
	closing := map[byte]byte{'{': '}', '[': ']'}[open]
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '"', '\'', '`':
			end, err := skipQuoted(s, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case open:
			depth++
		case closing:
			if depth--; depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("unbalanced %q at %d", open, i)
}

func promTokens(expr string) ([]promToken, error) {
	var toks []promToken
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // a comment, to the end of the line
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			end, err := skipQuoted(expr, i)
			if err != nil {
				return nil, err
			}
			toks, i = append(toks, promToken{'s', expr[i:end]}), end
		case c == '{' || c == '[':
			end, err := skipBracketed(expr, i)
			if err != nil {
				return nil, err
			}
			toks, i = append(toks, promToken{c, expr[i:end]}), end
		case c == '$':
			j := i + 1
			if j < len(expr) && expr[j] == '{' {
				for j < len(expr) && expr[j] != '}' {
					j++
				}
				j++
			} else {
				for j < len(expr) && isIdentPart(expr[j]) {
					j++
				}
			}
			toks, i = append(toks, promToken{'v', expr[i:j]}), j
		case c >= '0' && c <= '9' || (c == '.' && i+1 < len(expr) && expr[i+1] >= '0' && expr[i+1] <= '9'):
			j := i + 1
			for j < len(expr) && (isIdentPart(expr[j]) || expr[j] == '.' ||
				((expr[j] == '+' || expr[j] == '-') && (expr[j-1] == 'e' || expr[j-1] == 'E'))) {
				j++
			}
			toks, i = append(toks, promToken{'n', expr[i:j]}), j
		case isIdentStart(c):
			j := i + 1
			for j < len(expr) && isIdentPart(expr[j]) {
				j++
			}
			toks, i = append(toks, promToken{'i', expr[i:j]}), j
		default:
			toks, i = append(toks, promToken{'p', string(c)}), i+1
		}
	}
	return toks, nil
}

// promMetrics returns the metric names expr selects, sorted, each once.
func promMetrics(expr string) ([]string, error) {
	toks, err := promTokens(expr)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", expr, err)
	}
	var names []string
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.kind != 'i' {
			continue
		}
		next := promToken{}
		if i+1 < len(toks) {
			next = toks[i+1]
		}
		word := strings.ToLower(t.text)
		switch {
		case promLabelLists[word] && next.kind == 'p' && next.text == "(":
			// A list of label names: skip to its ")".
			for i += 2; i < len(toks) && (toks[i].kind != 'p' || toks[i].text != ")"); i++ {
			}
		case promKeywords[word]:
		case next.kind == 'p' && next.text == "(":
			// A function or an aggregation: sum(...), rate(...).
		case next.kind == 'i' && (next.text == "by" || next.text == "without"):
			// An aggregation with its grouping first: sum by (x) (...).
		default:
			names = append(names, t.text)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

func TestPromMetrics(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`sum by (result) (rate(harvest_ingest_starts_total[$__rate_interval]))`, []string{"harvest_ingest_starts_total"}},
		{`sum(rate(a_total{code=~"5..", route!="GET /metrics"}[5m])) by (route, code)`, []string{"a_total"}},
		{`histogram_quantile(0.99, sum by (le, route) (rate(x_seconds_bucket[${__rate_interval}])))`, []string{"x_seconds_bucket"}},
		{`sum(rate(b_sum[1m])) / sum(rate(b_count[1m]))`, []string{"b_count", "b_sum"}},
		{`a / on (instance) group_left (owner) harvest_scheduler_info`, []string{"a", "harvest_scheduler_info"}},
		{`max without (le) (c) > bool 0 and d unless e or f offset 5m`, []string{"c", "d", "e", "f"}},
		{`label_replace(g, "by", "$1", "sum", "(.*)") * 1e-3 + inf`, []string{"g"}},
		{`clamp_min(sum(rate(h[5m])), 1e-9) # a comment naming i`, []string{"h"}},
		{`topk(5, sum by (shard) (j{shard="1"})) - count_values("value", k)`, []string{"j", "k"}},
		{`rate(l[5m:30s])`, []string{"l"}},
		{`sum by (x) (m) + sum without(y)(n)`, []string{"m", "n"}},
		{`job:request_rate:5m`, []string{"job:request_rate:5m"}},
	} {
		got, err := promMetrics(c.expr)
		require.NoError(t, err, c.expr)
		require.Equal(t, c.want, got, c.expr)
	}
	for _, bad := range []string{`rate(a{b="c}[5m])`, `a{b="c"`, `sum(rate(a[5m))`} {
		_, err := promMetrics(bad)
		require.Error(t, err, bad)
	}
}
