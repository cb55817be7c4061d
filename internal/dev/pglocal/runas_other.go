//go:build !unix

package pglocal

// runAs is never populated outside Unix: there is no root to step down from.
type runAs struct{}

func lookupRunAs() (*runAs, error)             { return nil, nil }
func (r *runAs) chownR(string) error           { return nil }
func (r *runAs) checkTraversable(string) error { return nil }
func (r *runAs) credential() *credential       { return nil }
