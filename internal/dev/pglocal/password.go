package pglocal

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// hbaFile is the cluster's client authentication file, in its data
// directory.
const hbaFile = "pg_hba.conf"

// hbaPassword is pg_hba.conf when Config.Password is set: every
// connection authenticates with its role's password, and nothing is
// trusted.
//
//nolint:gosec // G101: pg_hba.conf's text, which names the method and holds no password.
const hbaPassword = `# Written by Harvest (internal/dev/pglocal) at each start: every connection
# authenticates with its role's password (SCRAM-SHA-256); nothing is
# trusted. Edits are overwritten.
# TYPE  DATABASE  USER  ADDRESS  METHOD
local   all       all            scram-sha-256
host    all       all   all      scram-sha-256
`

// singleUserFailed matches what a single-user backend reports when a
// command failed; it exits 0 all the same.
var singleUserFailed = regexp.MustCompile(`(?m)^(ERROR|FATAL|PANIC):`)

// requirePassword makes the cluster require Config.Password, before the
// server listens: it sets User's password in a single-user backend (no
// connection is accepted meanwhile), then replaces pg_hba.conf with
// hbaPassword. It does nothing when Config.Password is empty. waited is
// waitShmem's.
func (l *launcher) requirePassword(ctx context.Context, waited *bool) error {
	if l.cfg.Password == "" {
		return nil
	}
	for {
		out, err := l.setPassword(ctx)
		if err == nil {
			break
		}
		if strings.Contains(out, "pre-existing shared memory block") && l.waitShmem(ctx, waited) {
			continue
		}
		return err
	}
	path := filepath.Join(l.dataDir, hbaFile)
	if err := os.WriteFile(path, []byte(hbaPassword), 0o600); err != nil {
		return fmt.Errorf("pglocal: write %s: %w", hbaFile, err)
	}
	// WriteFile keeps an existing file's mode.
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("pglocal: %w", err)
	}
	return l.who.chownR(path)
}

// setPassword sets User's password to Config.Password in a single-user
// backend (`postgres --single`), which runs as the bootstrap superuser
// and listens nowhere. It returns the backend's output too.
func (l *launcher) setPassword(ctx context.Context) (string, error) {
	cd, err := l.openForChild(l.dataDir)
	if err != nil {
		return "", err
	}
	defer cd.close()
	args := []string{
		"--single", "-D", cd.path,
		// A failed statement is not quoted in the output: it holds the
		// password.
		"-c", "log_min_error_statement=panic",
	}
	if !l.cfg.Durable {
		args = append(args, "-c", "fsync=off")
	}
	args = append(args, "postgres")
	cmd := exec.CommandContext(ctx, filepath.Join(l.binDir, exe("postgres")), args...)
	cd.apply(cmd)
	cmd.SysProcAttr = sysProcAttr(l.who.credential(), syscall.SIGKILL)
	cmd.Cancel = func() error { return killGroup(cmd.Process) }
	cmd.WaitDelay = outputGrace
	// One command a line; the password is SCRAM-hashed by the server.
	cmd.Stdin = strings.NewReader("SET password_encryption = 'scram-sha-256'\n" +
		"ALTER ROLE " + pgx.Identifier{l.cfg.User}.Sanitize() + " WITH LOGIN PASSWORD '" + strings.ReplaceAll(l.cfg.Password, "'", "''") + "'\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	exited := make(chan error, 1)
	if err := startLocked(cmd, func(err error) { exited <- err }); err != nil {
		return "", fmt.Errorf("pglocal: run postgres --single: %w", err)
	}
	err = <-exited
	output := out.String()
	l.log.Debug("pglocal: postgres --single output", "output", output)
	if err == nil && singleUserFailed.MatchString(output) {
		err = fmt.Errorf("the password of role %q was not set", l.cfg.User)
	}
	if err != nil {
		return output, fmt.Errorf("pglocal: set the password: %w%s", err, quote("postgres --single", lastLines(output, tailLines)))
	}
	return output, nil
}
