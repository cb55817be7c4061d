package e2e

// The markdown convention TestTheDocsExamplesRun reads (see its comment
// in docs_test.go), and how it compares what an example printed with what
// its page says it prints.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ellipsis marks what varies (ids, times) or what a page leaves out.
const ellipsis = "…"

// docBlock is one ```sh block of a page, or one "again" output that runs
// the sh block before it once more.
type docBlock struct {
	page    string
	line    int    // the opening fence's line, from 1
	text    string // the commands, as written
	marker  string // "", "skip", "restart", "needs nats" or "again"
	reason  string // a skip's reason
	outputs []string
}

func (b docBlock) where() string { return fmt.Sprintf("%s:%d", b.page, b.line) }

// fence is one fenced block of a page.
type fence struct {
	line     int
	lang     string
	text     string
	marker   string // the doc-test directive right before it
	adjacent bool   // only blank lines since the previous fence closed
}

var (
	markerLine = regexp.MustCompile(`^<!-- doc-test: (.*?) -->$`)
	// shellLangs are the fence languages that mean commands; only sh is
	// run, so the others are refused rather than silently left out.
	shellLangs = []string{"bash", "shell", "console", "zsh", "shell-session", "shellsession", "terminal"}
	// commandLike is a bare fence's first line that is a command, not
	// output.
	commandLike = regexp.MustCompile(`^(\$ |curl |go (run|test|install) |harvest [a-z]|nats [a-z])`)
)

// parseDoc reads a page's fences and returns its sh blocks, each with the
// output fences that follow it, in page order.
func parseDoc(page string, doc []byte) ([]docBlock, error) {
	var fences []fence
	var (
		marker     string
		markerAt   int
		inFence    bool
		cur        fence
		indent     int
		body       []string
		lastClosed = -1 // line index of the last closing fence
		blankSince = true
	)
	lines := strings.Split(strings.ReplaceAll(string(doc), "\r\n", "\n"), "\n")
	for i, raw := range lines {
		trimmed := strings.TrimSpace(raw)
		if inFence {
			if trimmed == "```" {
				cur.text = strings.Join(body, "\n")
				fences = append(fences, cur)
				inFence, lastClosed, blankSince = false, i, true
				continue
			}
			line := raw
			for n := 0; n < indent && strings.HasPrefix(line, " "); n++ {
				line = line[1:]
			}
			body = append(body, line)
			continue
		}
		if m := markerLine.FindStringSubmatch(trimmed); m != nil {
			if marker != "" {
				return nil, fmt.Errorf("%s:%d: doc-test marker %q is followed by another marker, not a fence", page, markerAt, marker)
			}
			marker, markerAt = m[1], i+1
			continue
		}
		if strings.Contains(trimmed, "doc-test:") {
			return nil, fmt.Errorf("%s:%d: a doc-test marker is one line, <!-- doc-test: ... -->: %q", page, i+1, trimmed)
		}
		if strings.HasPrefix(trimmed, "```") {
			indent = len(raw) - len(strings.TrimLeft(raw, " "))
			cur = fence{line: i + 1, lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), marker: marker,
				adjacent: lastClosed >= 0 && blankSince}
			marker, body, inFence = "", nil, true
			continue
		}
		if trimmed != "" {
			if marker != "" {
				return nil, fmt.Errorf("%s:%d: doc-test marker %q must be right before a fence", page, markerAt, marker)
			}
			blankSince = false
		}
	}
	if inFence {
		return nil, fmt.Errorf("%s:%d: fence not closed", page, cur.line)
	}
	if marker != "" {
		return nil, fmt.Errorf("%s:%d: doc-test marker %q is not followed by a fence", page, markerAt, marker)
	}

	var blocks []docBlock
	var last *docBlock // the sh block outputs attach to
	for _, f := range fences {
		lang := strings.ToLower(f.lang)
		if slices.Contains(shellLangs, lang) {
			return nil, fmt.Errorf("%s:%d: a %q block: write shell examples as ```sh, which the docs test runs", page, f.line, f.lang)
		}
		directive, reason, _ := strings.Cut(f.marker, ":")
		directive, reason = strings.TrimSpace(directive), strings.TrimSpace(reason)
		switch lang {
		case "sh":
			switch directive {
			case "", "restart", "needs nats":
				if reason != "" {
					return nil, fmt.Errorf("%s:%d: doc-test %q takes no reason", page, f.line, directive)
				}
			case "skip":
				if reason == "" {
					return nil, fmt.Errorf("%s:%d: doc-test skip needs a reason: <!-- doc-test: skip: why -->", page, f.line)
				}
			default:
				return nil, fmt.Errorf("%s:%d: unknown doc-test marker %q before a sh block (skip: why, restart, needs nats)", page, f.line, f.marker)
			}
			blocks = append(blocks, docBlock{page: page, line: f.line, text: f.text, marker: directive, reason: reason})
			last = &blocks[len(blocks)-1]
		case "", "json", "text":
			if lang == "" {
				first, _, _ := strings.Cut(strings.TrimSpace(f.text), "\n")
				if commandLike.MatchString(first) {
					return nil, fmt.Errorf("%s:%d: a command in a bare fence: write it as ```sh (or mark the block)", page, f.line)
				}
			}
			switch {
			case directive == "again":
				if last == nil || last.marker == "skip" {
					return nil, fmt.Errorf("%s:%d: doc-test again needs a run sh block before it", page, f.line)
				}
				blocks = append(blocks, docBlock{page: page, line: f.line, text: last.text, marker: "again", outputs: []string{f.text}})
				last = &blocks[len(blocks)-1]
			case directive != "":
				return nil, fmt.Errorf("%s:%d: unknown doc-test marker %q before an output block (again)", page, f.line, f.marker)
			case f.adjacent && last != nil:
				last.outputs = append(last.outputs, f.text)
			default:
				last = nil
			}
		default:
			if f.marker != "" {
				return nil, fmt.Errorf("%s:%d: doc-test marker before a %q block", page, f.line, f.lang)
			}
			last = nil
		}
	}
	return blocks, nil
}

// segment is a run of a block's lines that ends with an expectation
// comment ("# → …"), or the block's last lines, which its output fences
// describe.
type segment struct {
	script  string
	expect  *expectation // nil for the last lines
	outputs []string
}

var expectComment = regexp.MustCompile(`(?:^|\s)# → (.*)$`)

func splitSegments(b docBlock) ([]segment, error) {
	var segs []segment
	var cur []string
	for i, line := range strings.Split(b.text, "\n") {
		cur = append(cur, line)
		m := expectComment.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		e, err := parseExpectation(m[1])
		if err != nil {
			return nil, fmt.Errorf("%s, line %d of the block: %w", b.where(), i+1, err)
		}
		segs = append(segs, segment{script: strings.Join(cur, "\n"), expect: e})
		cur = nil
	}
	rest := strings.Join(cur, "\n")
	switch {
	case strings.TrimSpace(rest) == "" && len(b.outputs) > 0 && len(segs) > 0:
		// The block ends with a "# →": its output fences show what
		// that segment prints.
		segs[len(segs)-1].outputs = b.outputs
	case strings.TrimSpace(rest) != "" || len(b.outputs) > 0:
		segs = append(segs, segment{script: rest, outputs: b.outputs})
	}
	return segs, nil
}

// expectation is what a "# → " comment says its segment answers:
//
//	# → 201                      every HTTP call of the segment answers 201
//	# → 200 {"status": "…"}      …and the last JSON it printed has these members
//	# → exit 1: harvest: …       the last command exits 1 and prints this last line
//	# → signal delivered         the last line printed (and exit status 0)
type expectation struct {
	src     string
	status  int
	fields  any // a JSON value, compared partially; nil if not given
	hasBody bool
	exit    int
	text    string // "" if not given
}

var (
	statusExpect = regexp.MustCompile(`^(\d{3})\b(.*)$`)
	exitExpect   = regexp.MustCompile(`^exit (\d+)(?::\s*(.*))?$`)
)

func parseExpectation(s string) (*expectation, error) {
	s = strings.TrimSpace(s)
	e := &expectation{src: s}
	if m := statusExpect.FindStringSubmatch(s); m != nil {
		e.status, _ = strconv.Atoi(m[1])
		rest := strings.TrimSpace(m[2])
		if rest == "" {
			return e, nil
		}
		if rest[0] != '{' && rest[0] != '[' {
			return nil, fmt.Errorf("# → %s: after the status, a JSON object or nothing (put prose on the next line)", s)
		}
		v, _, err := expectedJSON(rest)
		if err != nil {
			return nil, fmt.Errorf("# → %s: %w", s, err)
		}
		e.fields, e.hasBody = v, true
		return e, nil
	}
	if m := exitExpect.FindStringSubmatch(s); m != nil {
		e.exit, _ = strconv.Atoi(m[1])
		e.text = m[2]
		return e, nil
	}
	if s == "" {
		return nil, errors.New("an empty # → expectation")
	}
	e.text = s
	return e, nil
}

// expectedJSON reads one JSON value from the start of s as a page writes
// it: a bare … stands for members (in an object) or elements (in an
// array) the page leaves out. It returns the value and the text after it.
func expectedJSON(s string) (any, string, error) {
	var out strings.Builder
	var stack []byte
	inString, escaped := false, false
	end := -1
	for i, r := range s {
		if inString {
			out.WriteRune(r)
			switch {
			case escaped:
				escaped = false
			case r == '\\':
				escaped = true
			case r == '"':
				inString = false
			}
			continue
		}
		switch r {
		case '"':
			inString = true
		case '{', '[':
			stack = append(stack, byte(r))
		case '}', ']':
			if len(stack) == 0 {
				return nil, "", fmt.Errorf("unbalanced %q in %q", r, s)
			}
			stack = stack[:len(stack)-1]
		}
		if r == '…' {
			if len(stack) > 0 && stack[len(stack)-1] == '{' {
				out.WriteString(`"…": "…"`)
			} else {
				out.WriteString(`"…"`)
			}
		} else {
			out.WriteRune(r)
		}
		if len(stack) == 0 && (r == '}' || r == ']') {
			end = i + 1
			break
		}
	}
	if end < 0 {
		return nil, "", fmt.Errorf("no complete JSON value in %q", s)
	}
	d := json.NewDecoder(strings.NewReader(out.String()))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, "", fmt.Errorf("not JSON (… aside): %w: %s", err, out.String())
	}
	return v, s[end:], nil
}

// item is one thing an example printed, or its page says it prints: an
// HTTP status line with its headers, a JSON value, or a line of text.
type item struct {
	status  int
	headers map[string]string
	json    any
	isJSON  bool
	text    string
}

func (it item) String() string {
	switch {
	case it.status != 0:
		return fmt.Sprintf("HTTP %d", it.status)
	case it.isJSON:
		b, _ := json.Marshal(it.json)
		return string(b)
	}
	return fmt.Sprintf("%q", it.text)
}

var statusLine = regexp.MustCompile(`^HTTP/[0-9.]+ (\d{3})\b`)

// items splits output into items; expected selects the page's reading of
// JSON (with …) over the strict one.
func items(out string, expected bool) ([]item, error) {
	out = strings.ReplaceAll(out, "\r\n", "\n")
	var res []item
	for len(out) > 0 {
		line, rest, _ := strings.Cut(out, "\n")
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			out = rest
		case statusLine.MatchString(trimmed):
			code, _ := strconv.Atoi(statusLine.FindStringSubmatch(trimmed)[1])
			it := item{status: code, headers: map[string]string{}}
			out = rest
			for out != "" {
				h, r, _ := strings.Cut(out, "\n")
				name, value, ok := strings.Cut(strings.TrimSpace(h), ":")
				if strings.TrimSpace(h) == "" || !ok || strings.ContainsAny(name, " {\"") {
					break
				}
				it.headers[strings.ToLower(name)] = strings.TrimSpace(value)
				out = r
			}
			res = append(res, it)
		case trimmed[0] == '{' || trimmed[0] == '[':
			at := strings.Index(out, trimmed[:1])
			var v any
			var after string
			var err error
			if expected {
				v, after, err = expectedJSON(out[at:])
			} else {
				d := json.NewDecoder(strings.NewReader(out[at:]))
				d.UseNumber()
				if err = d.Decode(&v); err == nil {
					after = out[at+int(d.InputOffset()):]
				}
			}
			if err != nil {
				if expected && strings.HasPrefix(trimmed, "{") {
					return nil, err
				}
				res = append(res, item{text: trimmed})
				out = rest
				continue
			}
			res = append(res, item{json: v, isJSON: true})
			tail, r, _ := strings.Cut(after, "\n")
			if strings.TrimSpace(tail) != "" {
				res = append(res, item{text: strings.TrimSpace(tail)})
			}
			out = r
		default:
			res = append(res, item{text: trimmed})
			out = rest
		}
	}
	return res, nil
}

// matchItems compares what was printed with what the page says, item by
// item.
func matchItems(want, got []item) error {
	for i, w := range want {
		if i >= len(got) {
			return fmt.Errorf("item %d: the page shows %s; nothing more was printed", i+1, w)
		}
		g := got[i]
		switch {
		case w.status != 0:
			if g.status != w.status {
				return fmt.Errorf("item %d: the page shows HTTP %d; got %s", i+1, w.status, g)
			}
			for name, value := range w.headers {
				v, ok := g.headers[name]
				if !ok || !textMatches(value, v) {
					return fmt.Errorf("item %d: the page shows header %s: %s; got %q", i+1, name, value, v)
				}
			}
		case w.isJSON:
			if !g.isJSON {
				return fmt.Errorf("item %d: the page shows JSON %s; got %s", i+1, w, g)
			}
			if err := matchJSON(w.json, g.json, "", false); err != nil {
				return fmt.Errorf("item %d: %w\n  page: %s\n  got:  %s", i+1, err, w, g)
			}
		default:
			if g.isJSON || g.status != 0 || !textMatches(w.text, g.text) {
				return fmt.Errorf("item %d: the page shows %s; got %s", i+1, w, g)
			}
		}
	}
	if len(got) > len(want) {
		return fmt.Errorf("printed %d more item(s) than the page shows, from %s", len(got)-len(want), got[len(want)])
	}
	return nil
}

// matchJSON compares a page's JSON with an answer's. A string "…" matches
// any value; a string holding … matches by shape (see textMatches). An
// object must have the page's members, and no others unless the page
// writes … among them (or partial is set, for a "# →" comment); an array
// must have the page's elements in order, and more only after a final ….
func matchJSON(want, got any, path string, partial bool) error {
	if s, ok := want.(string); ok && s == ellipsis {
		return nil
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want an object, got %v", pathOr(path), got)
		}
		_, open := w[ellipsis]
		for k, wv := range w {
			if k == ellipsis {
				continue
			}
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("%s/%s: missing", path, k)
			}
			if err := matchJSON(wv, gv, path+"/"+k, partial); err != nil {
				return err
			}
		}
		if !open && !partial {
			var extra []string
			for k := range g {
				if _, ok := w[k]; !ok {
					extra = append(extra, k)
				}
			}
			if len(extra) > 0 {
				sort.Strings(extra)
				return fmt.Errorf("%s: members the page does not show (write … for them): %s", pathOr(path), strings.Join(extra, ", "))
			}
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok {
			return fmt.Errorf("%s: want an array, got %v", pathOr(path), got)
		}
		open := len(w) > 0 && w[len(w)-1] == ellipsis
		if open {
			w = w[:len(w)-1]
		}
		if len(g) < len(w) || (!open && len(g) != len(w)) {
			return fmt.Errorf("%s: want %d element(s), got %d", pathOr(path), len(w), len(g))
		}
		for i := range w {
			if err := matchJSON(w[i], g[i], fmt.Sprintf("%s/%d", path, i), partial); err != nil {
				return err
			}
		}
		return nil
	case string:
		g, ok := got.(string)
		if !ok || !textMatches(w, g) {
			return fmt.Errorf("%s: want %q, got %v", pathOr(path), w, got)
		}
		return nil
	case json.Number:
		g, ok := got.(json.Number)
		if !ok {
			return fmt.Errorf("%s: want %s, got %v", pathOr(path), w, got)
		}
		wf, _ := w.Float64()
		gf, _ := g.Float64()
		if wf != gf {
			return fmt.Errorf("%s: want %s, got %s", pathOr(path), w, g)
		}
		return nil
	default:
		if want != got {
			return fmt.Errorf("%s: want %v, got %v", pathOr(path), want, got)
		}
		return nil
	}
}

func pathOr(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

var spaces = regexp.MustCompile(`\s+`)

// textMatches compares a page's text with what was printed, white space
// runs counting as one space. Each … stands for the rest of a token that
// varies: the characters before it back to a space keep their shape (a
// digit or a-f is any hex digit, anything else itself), and it matches any
// run of characters but spaces; "…" alone matches anything.
func textMatches(want, got string) bool {
	want = strings.TrimSpace(spaces.ReplaceAllString(want, " "))
	got = strings.TrimSpace(spaces.ReplaceAllString(got, " "))
	if want == ellipsis {
		return true
	}
	if !strings.Contains(want, ellipsis) {
		return want == got
	}
	return textPattern(want).MatchString(got)
}

func textPattern(want string) *regexp.Regexp {
	parts := strings.Split(want, ellipsis)
	var b strings.Builder
	b.WriteString(`^`)
	for i, p := range parts {
		if i == len(parts)-1 {
			b.WriteString(regexp.QuoteMeta(p))
			break
		}
		cut := strings.LastIndexAny(p, " \t\"'(){}[],=")
		b.WriteString(regexp.QuoteMeta(p[:cut+1]))
		for _, r := range p[cut+1:] {
			if (r >= '0' && r <= '9') || (r >= 'a' && r <= 'f') {
				b.WriteString(`[0-9a-f]`)
			} else {
				b.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
		b.WriteString(`[^ ]*`)
	}
	b.WriteString(`$`)
	return regexp.MustCompile(b.String())
}

// lastJSON is the last JSON value in out.
func lastJSON(out string) (any, bool) {
	its, err := items(out, false)
	if err != nil {
		return nil, false
	}
	for i := len(its) - 1; i >= 0; i-- {
		if its[i].isJSON {
			return its[i].json, true
		}
	}
	return nil, false
}

// lastLine is the last line of out that is not blank.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n "), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// TestTheDocsConventionCanFail checks that the comparisons
// TestTheDocsExamplesRun relies on refuse what they must.
func TestTheDocsConventionCanFail(t *testing.T) {
	want, err := items("HTTP/1.1 201 Created\n```\n", true)
	require.NoError(t, err)
	require.Len(t, want, 2)

	page := "HTTP/1.1 409 Conflict\nRetry-After: 30\n\n{\"error\": \"x\", \"message\": \"execution 01a23735-4724-… is Completed\"}\n"
	want, err = items(page, true)
	require.NoError(t, err)
	ok, err := items("HTTP/1.1 409 Conflict\r\nRetry-After: 30\r\nDate: now\r\n\r\n{\"error\":\"x\",\"message\":\"execution 01a2440f-9819-7527-bdb1-91fe86bba5c7 is Completed\"}", false)
	require.NoError(t, err)
	require.NoError(t, matchItems(want, ok))
	for name, got := range map[string]string{
		"another status":       "HTTP/1.1 200 OK\nRetry-After: 30\n\n{\"error\":\"x\",\"message\":\"execution 01a2440f-9819 is Completed\"}",
		"a missing header":     "HTTP/1.1 409 Conflict\n\n{\"error\":\"x\",\"message\":\"execution 01a2440f-9819 is Completed\"}",
		"another value":        "HTTP/1.1 409 Conflict\nRetry-After: 30\n\n{\"error\":\"y\",\"message\":\"execution 01a2440f-9819 is Completed\"}",
		"an id of other shape": "HTTP/1.1 409 Conflict\nRetry-After: 30\n\n{\"error\":\"x\",\"message\":\"execution order-7 is Completed\"}",
		"a member not shown":   "HTTP/1.1 409 Conflict\nRetry-After: 30\n\n{\"error\":\"x\",\"message\":\"execution 01a2440f-9819 is Completed\",\"field\":\"f\"}",
		"a missing member":     "HTTP/1.1 409 Conflict\nRetry-After: 30\n\n{\"message\":\"execution 01a2440f-9819 is Completed\"}",
		"more output":          "HTTP/1.1 409 Conflict\nRetry-After: 30\n\n{\"error\":\"x\",\"message\":\"execution 01a2440f-9819 is Completed\"}\nmore",
		"less output":          "HTTP/1.1 409 Conflict\nRetry-After: 30\n",
	} {
		got, err := items(got, false)
		require.NoError(t, err)
		require.Error(t, matchItems(want, got), name)
	}

	// … among members allows others; a final … in an array, more elements.
	v, _, err := expectedJSON(`{"executions": [{"status": "Completed", …}, …]}`)
	require.NoError(t, err)
	var got any
	require.NoError(t, json.Unmarshal([]byte(`{"executions": [{"status": "Completed", "x": 1}, {"status": "Running"}]}`), &got))
	require.NoError(t, matchJSON(v, got, "", false))
	require.NoError(t, json.Unmarshal([]byte(`{"executions": [{"status": "Running", "x": 1}]}`), &got))
	require.Error(t, matchJSON(v, got, "", false))
	v, _, err = expectedJSON(`{"items": [1, 2]}`)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(`{"items": [1, 2, 3]}`), &got))
	require.Error(t, matchJSON(v, got, "", false))

	// A comment's members are a part of the answer.
	e, err := parseExpectation(`201 {"workflow_id": "order-a", "execution_id": "01a2370f-6124-…"}`)
	require.NoError(t, err)
	require.Equal(t, 201, e.status)
	d := json.NewDecoder(bytes.NewReader([]byte(`{"workflow_id": "order-a", "execution_id": "01a2440f-9819-7527", "status": "Running"}`)))
	d.UseNumber()
	require.NoError(t, d.Decode(&got))
	require.NoError(t, matchJSON(e.fields, got, "", true))
	_, err = parseExpectation(`200, the existing execution`)
	require.Error(t, err, "prose after a status is refused")

	require.True(t, textMatches("started execution 01a23735-b54c-… (workflow collect) fresh", "started execution 01a2440f-9819-7527-bdb1-91fe86bba5c7 (workflow collect) fresh"))
	require.False(t, textMatches("started execution 01a23735-b54c-… (workflow collect) fresh", "started execution 01a2440f-9819-7527 (workflow collect) deduplicated"))

	// Every shell block is run or marked.
	_, err = parseDoc("x.md", []byte("```bash\ncurl localhost:8080\n```\n"))
	require.Error(t, err)
	_, err = parseDoc("x.md", []byte("```\ncurl localhost:8080\n```\n"))
	require.Error(t, err)
	_, err = parseDoc("x.md", []byte("<!-- doc-test: skip -->\n```sh\ncurl localhost:8080\n```\n"))
	require.Error(t, err, "a skip says why")
	blocks, err := parseDoc("x.md", []byte("text\n\n```sh\ncurl localhost:8080 # → 200\n```\n\n```json\n{}\n```\nprose\n```json\n{}\n```\n"))
	require.NoError(t, err)
	require.Len(t, blocks, 1)
	require.Len(t, blocks[0].outputs, 1, "only the output right after a block is its own")
}
