//go:build linux

package pglocal

import (
	"os"
	"syscall"
)

// credential is the identity a child process runs as.
type credential = syscall.Credential

// sysProcAttr puts the child in its own process group (so a terminal's
// Ctrl-C reaches only us, and we decide how PostgreSQL stops), runs it as
// cred when non-nil, and asks the kernel to send deathSig to it when the OS
// thread that forked it exits. The caller keeps that thread alive for the
// lifetime of the child (see startProcess), so in practice the signal arrives
// when our process dies. Go applies PR_SET_PDEATHSIG after switching
// credentials, so the setting survives the switch.
func sysProcAttr(cred *credential, deathSig syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Setpgid:    true,
		Credential: cred,
		Pdeathsig:  deathSig,
	}
}

// killGroup sends SIGKILL to p's whole process group (p leads it, see
// sysProcAttr), taking PostgreSQL's backends down with the postmaster.
func killGroup(p *os.Process) error {
	return syscall.Kill(-p.Pid, syscall.SIGKILL)
}
