//go:build unix && !linux

package pglocal

import (
	"os"
	"syscall"
)

// credential is the identity a child process runs as.
type credential = syscall.Credential

// sysProcAttr puts the child in its own process group and runs it as cred
// when non-nil. There is no parent-death signal outside Linux, so if our
// process dies abruptly PostgreSQL keeps running, and the next Start on the
// same data directory reports the stale postmaster.
func sysProcAttr(cred *credential, _ syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Setpgid:    true,
		Credential: cred,
	}
}

// killGroup sends SIGKILL to p's whole process group (p leads it, see
// sysProcAttr), taking PostgreSQL's backends down with the postmaster.
func killGroup(p *os.Process) error {
	return syscall.Kill(-p.Pid, syscall.SIGKILL)
}
