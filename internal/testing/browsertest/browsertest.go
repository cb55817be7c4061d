// Package browsertest drives a headless Chromium for tests of what a
// browser does with Harvest's pages: the web console, and the API's
// refusal of a cross-site request. Without Chromium a test is skipped,
// unless HARVEST_BROWSER_TESTS=require (as .ci/run sets it): then it
// fails, naming what to install. Production code never imports it.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// Tab is a headless Chromium tab driven by a test.
type Tab struct {
	t   testing.TB
	ctx context.Context
}

// Start starts a headless Chromium for t, closed when t ends, and returns
// a tab of it. Without Chromium t is skipped (or fails, under
// HARVEST_BROWSER_TESTS=require).
func Start(t testing.TB) *Tab {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		msg := "no Chromium to drive the console's browser tests: apt-get install chromium"
		if os.Getenv("HARVEST_BROWSER_TESTS") == "require" {
			t.Fatal(msg)
		}
		t.Skip(msg + " (set HARVEST_BROWSER_TESTS=require to make this a failure)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // root, as on CI machines
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000),
		chromedp.UserDataDir(t.TempDir()),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(cancelTab)
	// The first call starts the browser, which lives as long as its
	// context: that one has no deadline; each step has one.
	require.NoError(t, chromedp.Do(ctx), "start Chromium at %s", path)
	return &Tab{t: t, ctx: ctx}
}

// Do runs steps, each page load and wait bounded.
func (b *Tab) Do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	require.NoError(b.t, chromedp.Do(ctx, steps...))
}

// Load runs steps that load a page (a click on a link, a form's submit)
// and waits until it has loaded; it returns the page's HTTP status.
func (b *Tab) Load(steps ...chromedp.Action[chromedp.Void]) int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, steps...)
	require.NoError(b.t, err)
	return resp.Status
}

// Get runs an action that reads something from the page.
func Get[T any](b *Tab, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	require.NoError(b.t, err)
	return v
}

// Screenshot saves the page as <name>.png in the folder
// HARVEST_CONSOLE_SCREENSHOTS names, if it names one (docs/console's
// pictures are made so).
func (b *Tab) Screenshot(name string) {
	b.t.Helper()
	dir := os.Getenv("HARVEST_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := Get(b, chromedp.FullScreenshot(100))
	require.NoError(b.t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}
