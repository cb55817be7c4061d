package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/internal/auth"
)

// maxTokenBytes bounds what `harvest token hash` reads.
const maxTokenBytes = 4 << 10

func newToken() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make API bearer tokens, and the sha256 lines that configure them",
		Long: `An API token is configured under auth.tokens by its SHA-256, so that the
token itself never sits in a configuration file:

  harvest token new > billing.token
  harvest token hash < billing.token     # sha256: 3a7bd3e2...

See docs/security.md.`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "new",
		Short: "Print a new random token (32 bytes from the system's CSPRNG)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token, err := auth.NewToken()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), token)
			return err
		},
	}, &cobra.Command{
		Use:   "hash",
		Short: "Read a token from stdin and print the sha256 line of its auth.tokens entry",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token, err := readToken(cmd.InOrStdin())
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "sha256: %s\n", auth.HashHex(token))
			return err
		},
	})
	return cmd
}

// readToken reads one token from r: its first line, without surrounding
// spaces.
func readToken(r io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, maxTokenBytes)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read the token from stdin: %w", err)
	}
	token := strings.TrimSpace(line)
	switch {
	case token == "":
		return "", errors.New("no token on stdin: pipe one in (harvest token new | tee my.token | harvest token hash)")
	case strings.ContainsAny(token, " \t"):
		return "", errors.New("the token holds a space: a bearer token cannot")
	}
	return token, nil
}
