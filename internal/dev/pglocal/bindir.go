package pglocal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrDataDirUnreachable is returned (wrapped) when we are root and the
// unprivileged user PostgreSQL runs as cannot reach DataDir.
var ErrDataDirUnreachable = errors.New("data directory unreachable for the PostgreSQL user")

// ErrNotInstalled reports that no PostgreSQL server binaries (initdb and
// postgres) could be found. Start wraps it; test with errors.Is.
var ErrNotInstalled = errors.New("PostgreSQL server binaries not found: install PostgreSQL 15+ (Debian: apt-get install postgresql) or set HARVEST_DATABASE_URL / HARVEST_PG_BIN")

// EnvBinDir names the environment variable that overrides where the
// PostgreSQL server binaries are looked up.
const EnvBinDir = "HARVEST_PG_BIN"

// debianPGRoot is where Debian and Ubuntu install one directory per major
// version, each with a bin/ subdirectory.
const debianPGRoot = "/usr/lib/postgresql"

// exe is the file name suffix of executables on this platform.
func exe(name string) string {
	if runtime.GOOS == "windows" {
		return name + ".exe"
	}
	return name
}

// hasServerBinaries reports whether dir holds both initdb and postgres.
func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, exe(name)))
		if err != nil || fi.IsDir() || (runtime.GOOS != "windows" && fi.Mode().Perm()&0o111 == 0) {
			return false
		}
	}
	return true
}

// findBinDir returns the directory holding initdb and postgres. An explicit
// choice (cfg.BinDir, then $HARVEST_PG_BIN) must hold them; otherwise it tries,
// in order, `pg_config --bindir`, the highest version under
// /usr/lib/postgresql/*/bin, and the directory of `postgres` on PATH.
func findBinDir(ctx context.Context, explicit string) (string, error) {
	if explicit != "" {
		if !hasServerBinaries(explicit) {
			return "", fmt.Errorf("pglocal: BinDir %q has no initdb and postgres: %w", explicit, ErrNotInstalled)
		}
		return explicit, nil
	}
	if env := os.Getenv(EnvBinDir); env != "" {
		if !hasServerBinaries(env) {
			return "", fmt.Errorf("pglocal: %s=%q has no initdb and postgres: %w", EnvBinDir, env, ErrNotInstalled)
		}
		return env, nil
	}
	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := exec.CommandContext(cctx, pgConfig, "--bindir").Output()
		cancel()
		// pg_config may come from a client-only package (libpq-dev), so the
		// directory it names is only a candidate.
		if dir := strings.TrimSpace(string(out)); err == nil && hasServerBinaries(dir) {
			return dir, nil
		}
	}
	if dir := highestDebianBinDir(debianPGRoot); dir != "" {
		return dir, nil
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		// Follow symlinks: /usr/local/bin/postgres -> .../15/bin/postgres
		// keeps initdb next to the target, not next to the link.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if dir := filepath.Dir(p); hasServerBinaries(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("pglocal: %w", ErrNotInstalled)
}

// highestDebianBinDir returns root/<N>/bin for the highest numeric N that
// holds the server binaries, or "".
func highestDebianBinDir(root string) string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return ""
	}
	type cand struct {
		major, minor int
		dir          string
	}
	var cands []cand
	for _, e := range entries {
		// Versions look like "15" or, before PostgreSQL 10, "9.6".
		majorStr, minorStr, _ := strings.Cut(e.Name(), ".")
		major, err := strconv.Atoi(majorStr)
		if err != nil {
			continue
		}
		minor, _ := strconv.Atoi(minorStr)
		dir := filepath.Join(root, e.Name(), "bin")
		if hasServerBinaries(dir) {
			cands = append(cands, cand{major, minor, dir})
		}
	}
	if len(cands) == 0 {
		return ""
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].major != cands[j].major {
			return cands[i].major > cands[j].major
		}
		return cands[i].minor > cands[j].minor
	})
	return cands[0].dir
}
