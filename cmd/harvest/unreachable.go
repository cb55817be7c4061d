package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"
)

// apiHint is what to do when no Harvest API answers at a client
// command's --addr.
const apiHint = "start one with `harvest dev`, or point --addr or HARVEST_ADDR at yours"

// unreachable adds to err, the error of a call to the HTTP API at addr,
// what to do when nothing answers there: the connection was refused, or
// the address could not be dialled at all. Other errors pass unchanged.
func unreachable(addr, hint string, err error) error {
	var op *net.OpError
	if err == nil || !(errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &op) && op.Op == "dial") {
		return err
	}
	return fmt.Errorf("no Harvest API answers at %s: %s (%w)", addr, hint, err)
}

// checkReachable makes sure something answers HTTP at base (its /healthz,
// whatever the answer), so that a command that would send many requests
// fails at once, saying what to do, when nothing does.
func checkReachable(ctx context.Context, base, hint string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", base, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return unreachable(base, hint, err)
	}
	return resp.Body.Close()
}
