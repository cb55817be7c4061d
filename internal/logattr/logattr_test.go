package logattr_test

import (
	"bytes"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/wire"
)

func TestCommandNamesWhatItCarries(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	line := func(cmd *wire.Command) map[string]any {
		buf.Reset()
		logattr.Command(log, cmd).Info("x")
		var m map[string]any
		require.NoError(t, json.Unmarshal(buf.Bytes(), &m))
		delete(m, "time")
		delete(m, "level")
		delete(m, "msg")
		return m
	}
	require.Equal(t, map[string]any{"workflow": "charge", "command_id": "c1"},
		line(&wire.Command{CommandID: "c1", Kind: wire.KindStart, Start: &wire.StartCommand{WorkflowName: "charge"}}),
		"a start has no execution yet")
	require.Equal(t, map[string]any{"execution_id": "e1", "command_id": "c2"},
		line(&wire.Command{CommandID: "c2", Kind: wire.KindSignal, Signal: &wire.SignalCommand{ExecutionID: "e1"}}))
	require.Equal(t, map[string]any{"execution_id": "e1", "command_id": "c3"},
		line(&wire.Command{CommandID: "c3", Kind: wire.KindCancel, Cancel: &wire.CancelCommand{ExecutionID: "e1"}}))
	require.Equal(t, map[string]any{"workflow": "order", "command_id": "c4"},
		line(&wire.Command{CommandID: "c4", Kind: wire.KindSignalWithStart, SignalWithStart: true,
			Start: &wire.StartCommand{WorkflowName: "order"}, Signal: &wire.SignalCommand{SignalName: "paid"}}))
	require.Equal(t, map[string]any{"execution_id": "e1", "command_id": "c5"},
		line(&wire.Command{CommandID: "c5", Kind: wire.KindActivityResult, Activity: &wire.ActivityResult{ExecutionID: "e1"}}))

	buf.Reset()
	logattr.With(log, "e1", "charge", "", logattr.ActivityAttempt("", 2, 3)...).InfoContext(context.Background(), "x")
	var m map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &m))
	require.Equal(t, "e1", m["execution_id"])
	require.Equal(t, "charge", m["workflow"])
	require.NotContains(t, m, "command_id", "empty values are left out")
	require.NotContains(t, m, "activity", "an unknown activity name is left out")
	require.EqualValues(t, 2, m["activity_id"])
	require.EqualValues(t, 3, m["attempt"])
}

// variant says whether key is another spelling of one of logattr's keys.
func variant(key string) bool {
	switch key {
	case logattr.ExecutionID, logattr.Workflow, logattr.CommandID, logattr.Activity, logattr.ActivityID:
		return false
	}
	norm := strings.NewReplacer("_", "", "-", "", ".", "").Replace(strings.ToLower(key))
	switch norm {
	case "exec", "execid", "execution", "executionid", "run", "runid",
		"workflow", "workflowname", "wf", "wfname", "wfid",
		"cmd", "cmdid", "command", "commandid",
		"activityname", "act", "actname", "actid", "activityid":
		return true
	}
	return false
}

// logCallArgs is where the key-value pairs start in the arguments of a
// slog.Logger method, by its name.
var logCallArgs = map[string]int{
	"Debug": 1, "Info": 1, "Warn": 1, "Error": 1,
	"DebugContext": 2, "InfoContext": 2, "WarnContext": 2, "ErrorContext": 2,
	"Log": 3, "LogAttrs": 3, "With": 0,
}

// attrFuncs are the slog functions that make an Attr of a key.
var attrFuncs = map[string]bool{
	"String": true, "Int": true, "Int64": true, "Uint64": true, "Float64": true, "Bool": true,
	"Time": true, "Duration": true, "Any": true, "Group": true,
}

// variantKeys returns, as "file:line: key", the log attribute keys in
// src's log calls that are variants of logattr's.
func variantKeys(fset *token.FileSet, f *ast.File) []string {
	var found []string
	report := func(e ast.Expr) {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return
		}
		key, err := strconv.Unquote(lit.Value)
		if err == nil && variant(key) {
			found = append(found, fset.Position(lit.Pos()).String()+": "+key)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "slog" && attrFuncs[sel.Sel.Name] && len(call.Args) > 0 {
			report(call.Args[0]) // slog.String("key", …)
			return true
		}
		from, ok := logCallArgs[sel.Sel.Name]
		if !ok || !strings.Contains(strings.ToLower(types.ExprString(sel.X)), "log") {
			return true // not a logger's (http.Error), as far as its name tells
		}
		// key, value pairs; an Attr (a call) takes one place; anything
		// else (a variable, a spread slice) ends what can be told.
		for i := from; i < len(call.Args); {
			switch a := call.Args[i].(type) {
			case *ast.BasicLit:
				report(a)
				i += 2
			case *ast.CallExpr:
				i++
			default:
				i = len(call.Args)
			}
		}
		return true
	})
	return found
}

func TestVariantKeysAreFound(t *testing.T) {
	t.Parallel()
	const src = `package p
func f() {
	log.Info("started", "exec", id, "shard", 3)
	log.With("workflow_name", n).Warn("x")
	log.WarnContext(ctx, "x", slog.String("run_id", id), "command", c)
	log.Info("fine", "execution_id", id, "workflow", n, "command_id", c, "activity", a, "activity_id", 1, "attempt", 2)
	slog.Any("ExecutionID", id)
	http.Error(w, "exec", 500)
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	require.NoError(t, err)
	var keys []string
	for _, v := range variantKeys(fset, f) {
		keys = append(keys, v[strings.LastIndex(v, " ")+1:])
	}
	slices.Sort(keys)
	// http.Error's "exec" is its message, and http no logger.
	require.Equal(t, []string{"ExecutionID", "command", "exec", "run_id", "workflow_name"}, keys)
}

// TestNoVariantKeys fails when a log call of the module's code (tests
// aside) spells an execution's attribute otherwise than logattr does.
func TestNoVariantKeys(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "the module's root")
	fset := token.NewFileSet()
	var found []string
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files++
		found = append(found, variantKeys(fset, f)...)
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 100, "the module's files were read")
	require.Empty(t, found, "log attribute keys that spell an execution's attributes otherwise than internal/logattr")
}
