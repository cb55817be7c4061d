package harvestcheck

import (
	"go/ast"
	"go/token"
	"go/types"
	"slices"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// harvestPath is the SDK's package: it defines what workflow code is, and
// its own code is trusted, not checked.
const harvestPath = "github.com/harvest-engine/harvest"

// Analyzer reports non-deterministic operations in workflow code and in
// the functions it calls; the package documentation lists them.
var Analyzer = &analysis.Analyzer{
	Name: "harvestcheck",
	Doc: `report workflow code that a replay could not repeat

Workflow code (functions whose first parameter is *harvest.WorkflowContext)
must not read the clock, draw random numbers, start goroutines, use Go
channels or select, let map order reach a decision, or write package-level
variables; nor may the functions it calls.`,
	URL:       "https://pkg.go.dev/github.com/harvest-engine/harvest/harvestcheck",
	Run:       run,
	FactTypes: []analysis.Fact{new(funcFact)},
}

// funcFact is what the analysis of a package tells the packages that
// import it about one of its exported functions or methods. At least one
// field is set.
type funcFact struct {
	// Steps says why a call to the function is not deterministic: the
	// calls on the way, then the operation, each as a phrase such as
	// "calls helper.Stamp" or "calls time.Now". Workflow functions have
	// none: they are reported where they are declared.
	Steps []string
	// Use says what to use instead of the operation Steps ends with.
	Use string
	// Harvest is the chain of calls from the function into package
	// harvest ("calls step", "calls harvest.ExecuteActivity"): calling it
	// may record something in the history.
	Harvest []string
}

func (*funcFact) AFact() {}

func (f *funcFact) String() string {
	var parts []string
	if len(f.Steps) > 0 {
		parts = append(parts, "not deterministic: "+strings.Join(f.Steps, ", which ")+" ("+f.Use+")")
	}
	if len(f.Harvest) > 0 {
		parts = append(parts, "reaches harvest: "+strings.Join(f.Harvest, ", which "))
	}
	return strings.Join(parts, "; ")
}

// kind is what a function's first parameter makes it.
type kind int

const (
	plain kind = iota
	workflow
	activity
)

// kindOf says whether sig is a workflow function, an activity function or
// neither, by its first parameter.
func kindOf(sig *types.Signature) kind {
	if sig == nil || sig.Params().Len() == 0 {
		return plain
	}
	ptr, ok := types.Unalias(sig.Params().At(0).Type()).(*types.Pointer)
	if !ok {
		return plain
	}
	named, ok := types.Unalias(ptr.Elem()).(*types.Named)
	if !ok || named.Obj().Pkg() == nil || named.Obj().Pkg().Path() != harvestPath {
		return plain
	}
	switch named.Obj().Name() {
	case "WorkflowContext":
		return workflow
	case "ActivityContext":
		return activity
	}
	return plain
}

// finding is one non-deterministic operation in a body of code.
type finding struct {
	pos  token.Pos
	what string // a phrase after "workflow code": "calls time.Now"
	use  string // what to use instead
	// viaCall, when set, replaces use where the finding is reached
	// through a call: the fix is then at the call, not in the callee.
	viaCall string
	// rank orders the findings of a function for its summary: the lowest
	// names the clearest fault (the clock, randomness, goroutines and
	// channels; then map order; then package-level state).
	rank int
}

// staticCall is a call whose callee is known: a function or a concrete
// method outside package harvest. Only those of the packages the analyzer
// follows have facts; the standard library's have none.
type staticCall struct {
	expr   *ast.CallExpr
	callee *types.Func // the generic origin, for instances
}

// unit is a body of code judged as a whole: a declared function (with the
// function literals inside it), or a workflow function literal, which is
// judged on its own rather than as part of the function it appears in.
type unit struct {
	obj  *types.Func // nil for a literal
	kind kind
	body *ast.BlockStmt

	// What scan finds in the body.
	findings  []finding
	calls     []staticCall
	mapRanges []*ast.RangeStmt // judged once the Harvest chains are known
	labels    map[*ast.RangeStmt]string
	// harvestCall is the first call into package harvest ("harvest.Sleep"),
	// a function rather than a method when there is one.
	harvestCall     string
	harvestIsMethod bool

	// steps and use summarise why calling the function is not
	// deterministic (see funcFact.Steps); harvest is its chain into
	// package harvest.
	steps   []string
	use     string
	harvest []string
}

// checker holds the analysis of one package.
type checker struct {
	pass  *analysis.Pass
	units []*unit
	byObj map[*types.Func]*unit
}

func run(pass *analysis.Pass) (any, error) {
	if skipped(pass) {
		return nil, nil
	}
	c := &checker{pass: pass, byObj: map[*types.Func]*unit{}}
	c.collect()
	for _, u := range c.units {
		c.scan(u)
	}
	c.summariseHarvest()
	for _, u := range c.units {
		for _, r := range u.mapRanges {
			if f, ok := c.mapRange(u, r); ok {
				u.findings = append(u.findings, f)
			}
		}
	}
	c.summariseSteps()
	c.exportFacts()
	c.report()
	return nil, nil
}

// skipped says whether the package is one the analyzer does not look
// into: package harvest, whose SDK is trusted (its tests included), and
// the standard library, whose functions are judged by name where they are
// called (time.Now, math/rand, ...). Following the standard library would
// condemn what workflow code rightly uses: the replay-safe logger reads
// the clock inside log/slog, fmt and encoding/json keep caches in
// package-level variables.
func skipped(pass *analysis.Pass) bool {
	path := pass.Pkg.Path()
	if path == harvestPath {
		return true
	}
	if pass.Module != nil && pass.Module.Path != "" {
		return false
	}
	// Without a module (a standard-library package, or a driver that does
	// not say), go by the import path: only the standard library's first
	// element has no dot.
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".") && path != "command-line-arguments"
}

// collect finds the units of the package: every declared function with a
// body, except activity functions, and every workflow function literal.
func (c *checker) collect() {
	info := c.pass.TypesInfo
	for _, file := range c.pass.Files {
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				fn, _ := info.Defs[n.Name].(*types.Func)
				if n.Body == nil || fn == nil {
					return false
				}
				if k := kindOf(fn.Signature()); k != activity {
					u := &unit{obj: fn, kind: k, body: n.Body}
					c.units = append(c.units, u)
					c.byObj[fn] = u
				}
			case *ast.FuncLit:
				if kindOf(litSignature(info, n)) == workflow {
					c.units = append(c.units, &unit{kind: workflow, body: n.Body})
				}
			}
			return true
		})
	}
}

func litSignature(info *types.Info, lit *ast.FuncLit) *types.Signature {
	sig, _ := info.TypeOf(lit).(*types.Signature)
	return sig
}

// factOf returns what is known of callee: its unit's summary when it is
// declared in this package, its imported fact otherwise (nil if none).
func (c *checker) factOf(callee *types.Func) *funcFact {
	if u, ok := c.byObj[callee]; ok {
		if u.steps == nil && u.harvest == nil {
			return nil
		}
		return &funcFact{Steps: u.steps, Use: u.use, Harvest: u.harvest}
	}
	if callee.Pkg() == c.pass.Pkg {
		return nil
	}
	var f funcFact
	if c.pass.ImportObjectFact(callee, &f) {
		return &f
	}
	return nil
}

// summariseHarvest computes each unit's chain into package harvest,
// following calls within the package until nothing changes, keeping the
// shortest chain.
func (c *checker) summariseHarvest() {
	for _, u := range c.units {
		if u.harvestCall != "" {
			u.harvest = []string{"calls " + u.harvestCall}
		}
	}
	for changed := true; changed; {
		changed = false
		for _, u := range c.units {
			for _, call := range u.calls {
				f := c.factOf(call.callee)
				if f == nil || len(f.Harvest) == 0 || (u.harvest != nil && len(f.Harvest)+1 >= len(u.harvest)) {
					continue
				}
				u.harvest = append([]string{"calls " + funcName(call.callee)}, f.Harvest...)
				changed = true
			}
		}
	}
}

// summariseSteps computes why calling each function is not
// deterministic: its clearest finding (see finding.rank), or else the
// shortest chain through the functions it calls. Workflow functions get
// no summary: their findings are reported in their own bodies.
func (c *checker) summariseSteps() {
	for _, u := range c.units {
		if u.kind != plain || len(u.findings) == 0 {
			continue
		}
		best := slices.MinFunc(u.findings, func(a, b finding) int { return a.rank - b.rank })
		u.steps, u.use = []string{best.what}, best.use
		if best.viaCall != "" {
			u.use = best.viaCall
		}
	}
	for changed := true; changed; {
		changed = false
		for _, u := range c.units {
			if u.kind != plain || (u.steps != nil && len(u.steps) == 1) {
				continue
			}
			for _, call := range u.calls {
				f := c.factOf(call.callee)
				if f == nil || len(f.Steps) == 0 || (u.steps != nil && len(f.Steps)+1 >= len(u.steps)) {
					continue
				}
				u.steps = append([]string{"calls " + funcName(call.callee)}, f.Steps...)
				u.use = f.Use
				changed = true
			}
		}
	}
}

// exportFacts records the summaries of exported functions and methods:
// only they can be called from another package.
func (c *checker) exportFacts() {
	for _, u := range c.units {
		if u.obj == nil || !u.obj.Exported() || (u.steps == nil && u.harvest == nil) {
			continue
		}
		c.pass.ExportObjectFact(u.obj, &funcFact{Steps: u.steps, Use: u.use, Harvest: u.harvest})
	}
}

// report reports, in each workflow unit, its own findings and its calls
// to functions that are not deterministic. A call to another workflow
// function is not reported: that function's findings are reported in its
// own body.
func (c *checker) report() {
	for _, u := range c.units {
		if u.kind != workflow {
			continue
		}
		for _, f := range u.findings {
			c.pass.Reportf(f.pos, "workflow code %s: %s", f.what, f.use)
		}
		for _, call := range u.calls {
			if kindOf(call.callee.Signature()) != plain {
				continue
			}
			if f := c.factOf(call.callee); f != nil && len(f.Steps) > 0 {
				c.pass.Reportf(call.expr.Pos(), "workflow code calls %s, which %s: %s",
					funcName(call.callee), strings.Join(f.Steps, ", which "), f.Use)
			}
		}
	}
}

// funcName names fn for a message: its package's name, its receiver's
// type for a method, and its name ("helper.Clock.Now").
func funcName(fn *types.Func) string {
	name := fn.Name()
	if recv := fn.Signature().Recv(); recv != nil {
		t := types.Unalias(recv.Type())
		if p, ok := t.(*types.Pointer); ok {
			t = types.Unalias(p.Elem())
		}
		if n, ok := t.(*types.Named); ok {
			name = n.Obj().Name() + "." + name
		}
	}
	if fn.Pkg() == nil {
		return name
	}
	return fn.Pkg().Name() + "." + name
}
