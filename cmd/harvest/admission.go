package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/client"
)

// addAPIFlags adds the flags of a command that talks to the HTTP API:
// its address and the bearer token to send.
// addClientFlags adds to a group of commands that talk to the HTTP API
// the API's flags (addAPIFlags), --json and --timeout, whose default and
// usage (what it bounds) are the group's.
func addClientFlags(cmd *cobra.Command, timeout time.Duration, timeoutUsage string) {
	addAPIFlags(cmd)
	cmd.PersistentFlags().Bool("json", false, "print the server's JSON answer")
	cmd.PersistentFlags().Duration("timeout", timeout, timeoutUsage)
}

func addAPIFlags(cmd *cobra.Command) {
	cmd.PersistentFlags().String("addr", envOr("HARVEST_ADDR", "http://127.0.0.1:8080"), "the Harvest HTTP API (HARVEST_ADDR)")
	// The token's default is not shown in --help: it is read from the
	// environment when the flag is not given.
	cmd.PersistentFlags().String("token", "", "bearer token for an API that requires one (default $HARVEST_TOKEN)")
}

// apiToken is the bearer token the client subcommands send: --token,
// else HARVEST_TOKEN.
func apiToken(cmd *cobra.Command) string {
	if token, _ := cmd.Flags().GetString("token"); token != "" {
		return token
	}
	return os.Getenv("HARVEST_TOKEN")
}

// apiAddr is the HTTP API the client subcommands talk to.
func apiAddr(cmd *cobra.Command) string {
	addr, _ := cmd.Flags().GetString("addr")
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return strings.TrimRight(addr, "/")
}

// callAPI sends a JSON request and prints the answer: with human for
// people, as the JSON answer with --json (or when human is nil); a
// non-2xx answer is an error carrying the API's message.
func callAPI(cmd *cobra.Command, method, path string, body any, human func(out io.Writer, raw []byte) error) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(cmd.Context(), method, apiAddr(cmd)+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token := apiToken(cmd); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return unreachable(apiAddr(cmd), apiHint, fmt.Errorf("%s %s: %w", method, path, err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var apiErr struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}
		if json.Unmarshal(raw, &apiErr) == nil && apiErr.Error != "" {
			return fmt.Errorf("%s: %s", apiErr.Error, apiErr.Message)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if human != nil && !jsonOutput(cmd) {
		return human(cmd.OutOrStdout(), raw)
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, raw, "", "  ") == nil {
		raw = append(pretty.Bytes(), '\n')
	}
	_, err = cmd.OutOrStdout().Write(raw)
	return err
}

func newAdmission() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admission",
		Short: "Pause and resume fresh starts of a workflow (the admission gate)",
		Long: `While a workflow's gate is closed, fresh starts get 503 admission_blocked
with Retry-After; keyed retries of starts already committed still get their
200 replay.`,
	}
	addAPIFlags(cmd)
	cmd.PersistentFlags().Bool("json", false, "print the server's JSON answer")
	var reason string
	closeCmd := &cobra.Command{
		Use:   "close <workflow>",
		Short: "Close the gate: refuse fresh starts of the workflow",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return callAPI(cmd, "POST", "/api/harvest/admission/"+url.PathEscape(args[0])+"/close", map[string]string{"reason": reason}, printGate)
		},
	}
	closeCmd.Flags().StringVar(&reason, "reason", "", "why (shown to refused callers; required)")
	_ = closeCmd.MarkFlagRequired("reason")
	openCmd := &cobra.Command{
		Use:   "open <workflow>",
		Short: "Open the gate again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return callAPI(cmd, "POST", "/api/harvest/admission/"+url.PathEscape(args[0])+"/open", nil, printGate)
		},
	}
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List the closed gates",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callAPI(cmd, "GET", "/api/harvest/admission", nil, func(out io.Writer, raw []byte) error {
				var l client.ListAdmissionResponse
				if err := json.Unmarshal(raw, &l); err != nil {
					return err
				}
				if len(l.Closed) == 0 {
					_, err := fmt.Fprintln(out, "every workflow's gate is open")
					return err
				}
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "WORKFLOW\tCLOSED_AT\tREASON")
				for _, g := range l.Closed {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", g.Workflow, formatTime(g.ClosedAt), g.Reason)
				}
				return tw.Flush()
			})
		},
	}
	cmd.AddCommand(closeCmd, openCmd, listCmd)
	return cmd
}

// printGate prints an admission gate as closing or opening it answers.
func printGate(out io.Writer, raw []byte) error {
	var g client.AdmissionGate
	if err := json.Unmarshal(raw, &g); err != nil {
		return err
	}
	line := fmt.Sprintf("workflow %s: gate %s", g.Workflow, g.State)
	if g.Reason != "" {
		line += " (" + g.Reason + ")"
	}
	if !g.ClosedAt.IsZero() {
		line += ", since " + formatTime(g.ClosedAt)
	}
	_, err := fmt.Fprintln(out, line)
	return err
}
