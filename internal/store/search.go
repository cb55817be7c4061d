package store

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/wire"
)

// SearchAttributeRow is one search attribute of an execution, as
// indexed (searchattr.Stored). A Value with no field set is an attribute
// removed: its row stays, without a value, so no filter matches it and
// no read shows it.
type SearchAttributeRow struct {
	ExecutionID, Name string
	Value             searchattr.Stored
}

// SearchAttributeCopy copies the search attributes of From to To (a
// run that continues From): every one, or with Only those To's workflow
// declares (name to type) whose value is of a column of that type, for
// a run of another workflow than From's, or one whose workflow is not
// known to be From's.
type SearchAttributeCopy struct {
	From, To string
	Only     map[string]string
}

// queueSearchAttributeWrites upserts rows, then copies what copies say,
// the rows this batch wrote included.
func queueSearchAttributeWrites(b *pgx.Batch, rows []SearchAttributeRow, copies []SearchAttributeCopy) {
	if len(rows) > 0 {
		rows = lastOf(rows, func(r SearchAttributeRow) [2]string { return [2]string{r.ExecutionID, r.Name} })
		n := len(rows)
		ids, names := make([]string, n), make([]string, n)
		keywords, nums, times := make([]*string, n), make([]*float64, n), make([]*time.Time, n)
		for i, r := range rows {
			ids[i], names[i] = r.ExecutionID, r.Name
			keywords[i], nums[i], times[i] = r.Value.Keyword, r.Value.Num, r.Value.Time
		}
		b.Queue(`INSERT INTO search_attributes (execution_id, name, keyword, num, ts)
			SELECT unnest($1::uuid[]), unnest($2::text[]), unnest($3::text[]), unnest($4::float8[]), unnest($5::timestamptz[])
			ON CONFLICT (execution_id, name) DO UPDATE SET keyword = excluded.keyword, num = excluded.num, ts = excluded.ts`,
			ids, names, keywords, nums, times)
	}
	var from, to []string
	for _, c := range copies {
		if c.Only == nil {
			from, to = append(from, c.From), append(to, c.To)
			continue
		}
		// Seldom (a continue-as-new to another workflow, a reset of a
		// continued run): a statement of its own.
		names, cols := make([]string, 0, len(c.Only)), make([]string, 0, len(c.Only))
		for name, typ := range c.Only {
			names, cols = append(names, name), append(cols, searchattr.Column(typ))
		}
		b.Queue(`INSERT INTO search_attributes (execution_id, name, keyword, num, ts)
			SELECT $2::uuid, s.name, s.keyword, s.num, s.ts
			FROM search_attributes AS s JOIN unnest($3::text[], $4::text[]) AS d(name, col) ON d.name = s.name
			WHERE s.execution_id = $1::uuid
			  AND (d.col = 'keyword' AND s.keyword IS NOT NULL OR d.col = 'num' AND s.num IS NOT NULL OR d.col = 'ts' AND s.ts IS NOT NULL)
			ON CONFLICT (execution_id, name) DO NOTHING`, c.From, c.To, names, cols)
	}
	if len(from) > 0 {
		b.Queue(`INSERT INTO search_attributes (execution_id, name, keyword, num, ts)
			SELECT c.to_id, s.name, s.keyword, s.num, s.ts
			FROM unnest($1::uuid[], $2::uuid[]) AS c(from_id, to_id) JOIN search_attributes AS s ON s.execution_id = c.from_id
			ON CONFLICT (execution_id, name) DO NOTHING`, from, to)
	}
}

// searchConditions adds to where the SQL of each condition on the
// executions table's rows, its values through arg.
func searchConditions(where []string, arg func(any) string, conds []searchattr.Condition) []string {
	ops := map[string]string{searchattr.OpEq: "=", searchattr.OpGt: ">", searchattr.OpGte: ">=", searchattr.OpLt: "<", searchattr.OpLte: "<="}
	for _, c := range conds {
		var col, val string
		switch {
		case c.Value.Keyword != nil:
			col, val = "keyword", arg(*c.Value.Keyword)
		case c.Value.Num != nil:
			col, val = "num", arg(*c.Value.Num)+"::float8"
		case c.Value.Time != nil:
			col, val = "ts", arg(*c.Value.Time)+"::timestamptz"
		default:
			continue
		}
		where = append(where, fmt.Sprintf("EXISTS (SELECT 1 FROM search_attributes AS sa WHERE sa.execution_id = executions.execution_id AND sa.name = %s AND sa.%s %s %s)",
			arg(c.Name), col, ops[c.Op], val))
	}
	return where
}

// SearchAttributes reads the search attributes of an execution, by name,
// each as JSON as it was set (a time as RFC 3339, a keyword as a
// string, an int or double as a number, a bool as a bool).
func (r *Reads) SearchAttributes(executionID string, types map[string]string, out *map[string]any) {
	r.b.Queue(`SELECT name, keyword, num, ts FROM search_attributes WHERE execution_id = $1 ORDER BY name`, executionID).Query(func(rows pgx.Rows) error {
		m := map[string]any{}
		var name string
		var keyword *string
		var num *float64
		var ts *time.Time
		_, err := pgx.ForEachRow(rows, []any{&name, &keyword, &num, &ts}, func() error {
			if v := SearchAttributeValue(wire.SearchValue{Keyword: keyword, Num: num, Time: ts}, types[name]); v != nil {
				m[name] = v
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("read search attributes of %s: %w", executionID, err)
		}
		if len(m) > 0 {
			*out = m
		}
		return nil
	})
}

// SearchAttributeValue is v, an attribute of type typ as indexed, as the
// API answers it: a time as RFC 3339, a keyword as a string, an int or
// double as a number, a bool as a bool; nil for no value.
func SearchAttributeValue(v wire.SearchValue, typ string) any {
	switch {
	case v.Keyword != nil && typ == "bool":
		return *v.Keyword == "true"
	case v.Keyword != nil:
		return *v.Keyword
	case v.Num != nil && typ == "int":
		return int64(*v.Num)
	case v.Num != nil:
		return *v.Num
	case v.Time != nil:
		return v.Time.UTC().Format(time.RFC3339Nano)
	}
	return nil
}

// listWhere is the WHERE of a listing or count of executions by f, its
// cursor included, and its arguments ($1 on).
func listWhere(f ListFilter) (string, []any) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	where = filterWhere(where, arg, f)
	if f.After != nil {
		where = append(where, "(created_at, execution_id) < ("+arg(f.After.CreatedAt)+", "+arg(f.After.ExecutionID)+"::uuid)")
	}
	if len(where) == 0 {
		return "", args
	}
	return " WHERE " + strings.Join(where, " AND "), args
}
