package harvestcheck

import (
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/types/typeutil"
)

// What to use instead, per rule.
const (
	useRand    = "use harvest.SideEffect(ctx, func() T {...}), which runs once and records its value for every replay"
	useGo      = "use harvest.Go(ctx, func(ctx *harvest.WorkflowContext) {...}), which a replay schedules in the same order"
	useChannel = "use harvest.NewChannel[T](ctx) (Send, Receive) and harvest.NewSelector(ctx), which a replay schedules in the same order"
	useMap     = "range over sorted keys instead, for _, k := range slices.Sorted(maps.Keys(m)): map order changes from run to run, so a replay could take another path"
	useGlobal  = "keep workflow state in local variables: a package-level variable is shared by every execution in the process and keeps its value across replays"
	// useGlobalVia is the advice for a package-level variable written by
	// a function workflow code calls, which may not be the caller's code.
	useGlobalVia = "a package-level variable is shared by every execution in the process and keeps its value across replays: call it inside harvest.SideEffect or an activity, or keep its state in local variables"
)

// Ranks of findings, clearest first (see finding.rank).
const (
	rankClear = iota
	rankMap
	rankGlobal
)

// timeUse is what to use instead of each function of package time that
// reads the clock or waits on it.
var timeUse = map[string]string{
	"Now":       "use harvest.Now(ctx), the workflow task's time, which a replay sees again",
	"Since":     "use harvest.Now(ctx).Sub(t)",
	"Until":     "use t.Sub(harvest.Now(ctx))",
	"Sleep":     "use harvest.Sleep(ctx, d), a durable timer",
	"After":     "use harvest.NewTimer(ctx, d), a durable timer (Wait on it, or AddTimer to a harvest.Selector)",
	"Tick":      "use harvest.NewTimer(ctx, d), a durable timer, once per tick",
	"NewTimer":  "use harvest.NewTimer(ctx, d), a durable timer",
	"NewTicker": "use harvest.NewTimer(ctx, d), a durable timer, once per tick",
	"AfterFunc": "use harvest.Go(ctx, ...) with a goroutine that calls harvest.Sleep(ctx, d) first",
}

// randPackages are the packages whose every function draws something a
// replay would draw differently.
var randPackages = map[string]bool{"math/rand": true, "math/rand/v2": true, "crypto/rand": true}

// recordsNothing are the functions and methods of package harvest that
// only read the execution's state or build values: calling them in map
// order decides nothing, so a map range may call them.
var recordsNothing = map[string]bool{
	"harvest.Now":                    true,
	"harvest.IsReplaying":            true,
	"harvest.NewSignal":              true,
	"harvest.NewActivity":            true,
	"harvest.NewError":               true,
	"harvest.NewNonRetryableError":   true,
	"harvest.NonRetryable":           true,
	"harvest.Activity.Name":          true,
	"harvest.WorkflowContext.Info":   true,
	"harvest.WorkflowContext.Logger": true,
}

// scanner walks the body of a unit and records its findings, its calls
// and its ranges over maps.
type scanner struct {
	c *checker
	u *unit
	// called holds the identifiers that name the function of a call, so
	// that a finding says "calls time.Now" rather than "uses time.Now".
	called map[*ast.Ident]bool
	// inSelect holds the sends and receives that are a select's cases:
	// the select is reported, not each of them.
	inSelect map[ast.Node]bool
}

func (c *checker) scan(u *unit) {
	s := &scanner{c: c, u: u, called: map[*ast.Ident]bool{}, inSelect: map[ast.Node]bool{}}
	ast.Inspect(u.body, s.visit)
}

// nested says whether a function literal inside a unit is judged apart
// from it: a workflow literal is a unit of its own, and an activity
// literal is not workflow code.
func (c *checker) nested(lit *ast.FuncLit) bool {
	return kindOf(litSignature(c.pass.TypesInfo, lit)) != plain
}

// isSideEffect says whether call is harvest.SideEffect, whose function
// runs once and has its value recorded: nothing in it is reported.
func (c *checker) isSideEffect(call *ast.CallExpr) bool {
	fn := typeutil.StaticCallee(c.pass.TypesInfo, call)
	return fn != nil && fn.Pkg() != nil && fn.Pkg().Path() == harvestPath && fn.Name() == "SideEffect"
}

func (s *scanner) add(pos token.Pos, what, use string) {
	s.u.findings = append(s.u.findings, finding{pos: pos, what: what, use: use, rank: rankClear})
}

func (s *scanner) visit(n ast.Node) bool {
	info := s.c.pass.TypesInfo
	switch n := n.(type) {
	case *ast.FuncLit:
		return !s.c.nested(n)
	case *ast.CallExpr:
		if s.c.isSideEffect(n) {
			// Only the context argument is workflow code; the function
			// (a literal or a value) runs once, recorded.
			s.call(n)
			ast.Inspect(n.Fun, s.visit)
			if len(n.Args) > 0 {
				ast.Inspect(n.Args[0], s.visit)
			}
			return false
		}
		if id := calledIdent(n.Fun); id != nil {
			s.called[id] = true
		}
		s.call(n)
	case *ast.GoStmt:
		s.add(n.Pos(), "starts a goroutine with the go statement", useGo)
	case *ast.SelectStmt:
		s.add(n.Pos(), "uses a select statement", useChannel)
		for _, clause := range n.Body.List {
			switch comm := clause.(*ast.CommClause).Comm.(type) {
			case *ast.SendStmt:
				s.inSelect[comm] = true
			case *ast.ExprStmt:
				s.inSelect[ast.Unparen(comm.X)] = true
			case *ast.AssignStmt:
				s.inSelect[ast.Unparen(comm.Rhs[0])] = true
			}
		}
	case *ast.SendStmt:
		if !s.inSelect[n] {
			s.add(n.Arrow, "sends on a Go channel", useChannel)
		}
	case *ast.UnaryExpr:
		if n.Op == token.ARROW && !s.inSelect[n] {
			s.add(n.OpPos, "receives from a Go channel", useChannel)
		}
	case *ast.RangeStmt:
		if isChan(info.TypeOf(n.X)) {
			s.add(n.Pos(), "ranges over a Go channel", useChannel)
		}
		if s.c.isMapRange(n) {
			s.u.mapRanges = append(s.u.mapRanges, n)
		}
		if n.Tok == token.ASSIGN {
			s.writes(n.Key, n.Value)
		}
	case *ast.LabeledStmt:
		if r, ok := n.Stmt.(*ast.RangeStmt); ok {
			if s.u.labels == nil {
				s.u.labels = map[*ast.RangeStmt]string{}
			}
			s.u.labels[r] = n.Label.Name
		}
	case *ast.AssignStmt:
		if n.Tok != token.DEFINE {
			s.writes(n.Lhs...)
		}
	case *ast.IncDecStmt:
		s.writes(n.X)
	case *ast.Ident:
		s.use(n)
	}
	return true
}

// call records a call to a function of package harvest, or to one the
// analyzer follows.
func (s *scanner) call(call *ast.CallExpr) {
	fn := typeutil.StaticCallee(s.c.pass.TypesInfo, call)
	if fn == nil || fn.Pkg() == nil {
		return // a builtin, a conversion, a function value or an interface method
	}
	fn = fn.Origin()
	if fn.Pkg().Path() == harvestPath {
		// The first call, but a function rather than a method when there
		// is one: in ExecuteActivity(...).Get, the outer call is Get, and
		// ExecuteActivity says more.
		name := funcName(fn)
		if !recordsNothing[name] && (s.u.harvestCall == "" || (s.u.harvestIsMethod && fn.Signature().Recv() == nil)) {
			s.u.harvestCall, s.u.harvestIsMethod = name, fn.Signature().Recv() != nil
		}
		return
	}
	s.u.calls = append(s.u.calls, staticCall{expr: call, callee: fn})
}

// use reports an identifier that names a clock function of package time,
// or a function, method or variable of a random package.
func (s *scanner) use(id *ast.Ident) {
	obj := s.c.pass.TypesInfo.Uses[id]
	if obj == nil || obj.Pkg() == nil {
		return
	}
	verb := "uses "
	if s.called[id] {
		verb = "calls "
	}
	switch path := obj.Pkg().Path(); {
	case path == "time":
		fn, ok := obj.(*types.Func)
		if !ok || fn.Signature().Recv() != nil {
			return // time.Time's After is a comparison, not a timer
		}
		if use, ok := timeUse[fn.Name()]; ok {
			s.add(id.Pos(), verb+"time."+fn.Name(), use)
		}
	case randPackages[path]:
		switch obj := obj.(type) {
		case *types.Func:
			s.add(id.Pos(), verb+path+"."+qualifiedName(obj), useRand)
		case *types.Var:
			if !obj.IsField() && obj.Pkg().Scope().Lookup(obj.Name()) == obj {
				s.add(id.Pos(), verb+path+"."+obj.Name(), useRand)
			}
		}
	}
}

// writes reports each expression, on the left of an assignment, that
// writes a package-level variable or something it holds.
func (s *scanner) writes(lhs ...ast.Expr) {
	for _, e := range lhs {
		if e == nil {
			continue
		}
		v := rootVar(s.c.pass.TypesInfo, e)
		if v != nil && isPackageLevel(v) {
			s.u.findings = append(s.u.findings, finding{pos: e.Pos(), what: "writes package-level variable " + v.Pkg().Name() + "." + v.Name(),
				use: useGlobal, viaCall: useGlobalVia, rank: rankGlobal})
		}
	}
}

// rootVar returns the variable an assignable expression writes into:
// x for x, x.f, x[i], *x and (x), following selectors of struct fields.
func rootVar(info *types.Info, e ast.Expr) *types.Var {
	for {
		switch x := e.(type) {
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.SelectorExpr:
			if sel, ok := info.Selections[x]; ok {
				if sel.Kind() != types.FieldVal {
					return nil
				}
				e = x.X
				continue
			}
			v, _ := info.Uses[x.Sel].(*types.Var) // a qualified identifier: pkg.Var
			return v
		case *ast.Ident:
			v, _ := info.ObjectOf(x).(*types.Var)
			return v
		default:
			return nil
		}
	}
}

func isPackageLevel(v *types.Var) bool {
	return v.Pkg() != nil && !v.IsField() && v.Pkg().Scope().Lookup(v.Name()) == v
}

// calledIdent returns the identifier that names the function of a call:
// f in f(), pkg.f(), x.f() and f[T]().
func calledIdent(fun ast.Expr) *ast.Ident {
	switch f := ast.Unparen(fun).(type) {
	case *ast.Ident:
		return f
	case *ast.SelectorExpr:
		return f.Sel
	case *ast.IndexExpr:
		return calledIdent(f.X)
	case *ast.IndexListExpr:
		return calledIdent(f.X)
	}
	return nil
}

// qualifiedName names fn within its package: Name, or Type.Name for a
// method.
func qualifiedName(fn *types.Func) string {
	full := funcName(fn)
	if fn.Pkg() != nil {
		return full[len(fn.Pkg().Name())+1:]
	}
	return full
}

func isChan(t types.Type) bool {
	if t == nil {
		return false
	}
	_, ok := t.Underlying().(*types.Chan)
	return ok
}
