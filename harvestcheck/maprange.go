package harvestcheck

import (
	"go/ast"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/types/typeutil"
)

// This file holds the map-range rule. Go randomises the order of a range
// over a map, so a loop is reported when that order can reach what the
// workflow does: the loop calls into package harvest (schedules an
// activity, sleeps, sends, receives: what the history records, in
// order), returns, leaves the loop on a condition (which element was
// found first), or appends to a slice declared outside the loop (an
// order that outlives it) that the function does not sort afterwards.
// Loops that only count, sum, or copy into other maps are not reported:
// their result is the same in any order.

// isMapRange says whether r iterates in a map's order: over a map, or
// over maps.Keys, maps.Values or maps.All of one.
func (c *checker) isMapRange(r *ast.RangeStmt) bool {
	info := c.pass.TypesInfo
	if t := info.TypeOf(r.X); t != nil {
		if _, ok := t.Underlying().(*types.Map); ok {
			return true
		}
	}
	call, ok := ast.Unparen(r.X).(*ast.CallExpr)
	if !ok {
		return false
	}
	fn := typeutil.StaticCallee(info, call)
	if fn == nil || fn.Pkg() == nil || fn.Pkg().Path() != "maps" {
		return false
	}
	switch fn.Name() {
	case "Keys", "Values", "All":
		return true
	}
	return false
}

// mapRange judges a range over a map in u: it returns the finding when
// the map's order can reach a decision.
func (c *checker) mapRange(u *unit, r *ast.RangeStmt) (finding, bool) {
	var reason string
	// stack holds the nodes from r.Body down to the one being visited;
	// lits counts the function literals among them, whose returns and
	// breaks are their own.
	var stack []ast.Node
	lits := 0
	ast.Inspect(r.Body, func(n ast.Node) bool {
		if reason != "" {
			return false
		}
		if n == nil {
			if _, ok := stack[len(stack)-1].(*ast.FuncLit); ok {
				lits--
			}
			stack = stack[:len(stack)-1]
			return true
		}
		switch n := n.(type) {
		case *ast.FuncLit:
			if c.nested(n) {
				return false
			}
			lits++
		case *ast.ReturnStmt:
			if lits == 0 {
				reason = "returns"
			}
		case *ast.BranchStmt:
			// A branch that is a statement of the loop body itself is not
			// conditional: `for range m { found = true; break }` only
			// asks whether the map is empty.
			if lits == 0 && len(stack) > 1 && leaves(n, stack, u.labels[r]) {
				reason = "leaves the loop on a condition"
			}
		case *ast.CallExpr:
			reason = c.harvestReason(n)
		case *ast.AssignStmt:
			if v := c.appendsOutside(n, r); v != nil && !c.sortedAfter(u.body, v, r.End()) {
				reason = "appends to " + v.Name() + ", declared outside the loop"
			}
		}
		stack = append(stack, n)
		return true
	})
	if reason == "" {
		return finding{}, false
	}
	return finding{pos: r.Pos(), what: "ranges over a map whose loop " + reason, use: useMap, rank: rankMap}, true
}

// leaves says whether the branch b, inside the loop body (stack), ends
// the loop: an unlabeled break not inside a nested for, switch or
// select, or a break or continue to a label outside the loop (continue to
// the loop's own label only moves to the next element).
func leaves(b *ast.BranchStmt, stack []ast.Node, loopLabel string) bool {
	switch b.Tok {
	case token.BREAK:
		if b.Label == nil {
			for _, n := range stack {
				switch n.(type) {
				case *ast.ForStmt, *ast.RangeStmt, *ast.SwitchStmt, *ast.TypeSwitchStmt, *ast.SelectStmt:
					return false
				}
			}
			return true
		}
		return !labelInside(b.Label.Name, stack)
	case token.CONTINUE:
		return b.Label != nil && b.Label.Name != loopLabel && !labelInside(b.Label.Name, stack)
	}
	return false
}

func labelInside(name string, stack []ast.Node) bool {
	for _, n := range stack {
		if l, ok := n.(*ast.LabeledStmt); ok && l.Label.Name == name {
			return true
		}
	}
	return false
}

// harvestReason says how a call reaches into package harvest, directly or
// through the functions it calls, as a phrase ("calls
// harvest.ExecuteActivity"); "" if it does not, or only reads.
func (c *checker) harvestReason(call *ast.CallExpr) string {
	fn := typeutil.StaticCallee(c.pass.TypesInfo, call)
	if fn == nil || fn.Pkg() == nil {
		return ""
	}
	fn = fn.Origin()
	name := funcName(fn)
	if fn.Pkg().Path() == harvestPath {
		if recordsNothing[name] {
			return ""
		}
		return "calls " + name
	}
	if f := c.factOf(fn); f != nil && len(f.Harvest) > 0 {
		return "calls " + name + ", which " + strings.Join(f.Harvest, ", which ")
	}
	return ""
}

// appendsOutside returns the variable that an assignment `x = append(x,
// ...)` appends to, when x is declared outside the loop r.
func (c *checker) appendsOutside(a *ast.AssignStmt, r *ast.RangeStmt) *types.Var {
	if a.Tok != token.ASSIGN {
		return nil
	}
	info := c.pass.TypesInfo
	for i, rhs := range a.Rhs {
		if i >= len(a.Lhs) {
			break
		}
		call, ok := ast.Unparen(rhs).(*ast.CallExpr)
		if !ok {
			continue
		}
		id := calledIdent(call.Fun)
		if id == nil {
			continue
		}
		if b, ok := info.Uses[id].(*types.Builtin); !ok || b.Name() != "append" {
			continue
		}
		if v := rootVar(info, a.Lhs[i]); v != nil && (v.Pos() < r.Pos() || v.Pos() >= r.End()) {
			return v
		}
	}
	return nil
}

// sorts are the functions that put a slice (their first argument) in an
// order of its own.
var sorts = map[string]bool{
	"sort.Strings": true, "sort.Ints": true, "sort.Float64s": true,
	"sort.Slice": true, "sort.SliceStable": true, "sort.Sort": true, "sort.Stable": true,
	"slices.Sort": true, "slices.SortFunc": true, "slices.SortStableFunc": true,
}

// sortedAfter says whether body sorts v after the position after:
// collecting a map's keys and sorting them is the usual way to iterate in
// order, not a fault.
func (c *checker) sortedAfter(body *ast.BlockStmt, v *types.Var, after token.Pos) bool {
	info := c.pass.TypesInfo
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if found || !ok || call.Pos() < after || len(call.Args) == 0 {
			return !found
		}
		fn := typeutil.StaticCallee(info, call)
		if fn == nil || fn.Pkg() == nil || !sorts[fn.Pkg().Path()+"."+fn.Name()] {
			return true
		}
		arg := ast.Unparen(call.Args[0])
		// sort.Sort(sort.StringSlice(keys)) sorts keys through a conversion.
		if conv, ok := arg.(*ast.CallExpr); ok && len(conv.Args) == 1 && info.Types[conv.Fun].IsType() {
			arg = conv.Args[0]
		}
		found = rootVar(info, arg) == v
		return !found
	})
	return found
}
