//go:build !unix

package pglocal

import (
	"os"
	"syscall"
)

// credential stands in for syscall.Credential, which only exists on Unix.
// It is never used: os.Geteuid reports -1 here, so we never step down from
// root.
type credential struct{}

func sysProcAttr(*credential, syscall.Signal) *syscall.SysProcAttr { return nil }

// killGroup kills p; there are no process groups to address here.
func killGroup(p *os.Process) error { return p.Kill() }
