package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/examples/fakepay"
	"github.com/harvest-engine/harvest/internal/service"
)

func newFakepay() *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "fakepay",
		Short: "Serve the example workflows' payment provider over HTTP",
		Long: `Serve the fake payment provider the example charge workflow uses, the way
a provider's API would: POST /v1/charges with an Idempotency-Key header,
GET /v1/charges/by-key/{key}, and GET /healthz. Workers given its address
(fakepay_url) all charge through it, so a charge made once is made once
whichever worker retries it. Charges live in memory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := service.SignalContext()
			defer stop()
			mux := http.NewServeMux()
			mux.Handle("/v1/", fakepay.NewHandler(fakepay.New()))
			mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"status":"ok"}`))
			})
			srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			errc := make(chan error, 1)
			go func() { errc <- srv.ListenAndServe() }()
			fmt.Fprintf(cmd.ErrOrStderr(), "harvest fakepay: serving on %s\n", addr)
			select {
			case err := <-errc:
				return fmt.Errorf("fakepay: %w", err)
			case <-ctx.Done():
			}
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := srv.Shutdown(stopCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8090", "listen address")
	return cmd
}
