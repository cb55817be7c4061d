package main

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestTheREADMEListsEveryDevFlag: the README's "Flags:" list for harvest
// dev names every flag it takes, and no other.
func TestTheREADMEListsEveryDevFlag(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	readme := string(data)
	at := strings.Index(readme, "`harvest dev` runs ingest")
	require.NotEqual(t, -1, at, "the README's harvest dev paragraph")
	para := readme[at:]
	para = para[:strings.Index(para, "\n\n")]
	list := para[strings.Index(para, "Flags:"):]
	list = list[:strings.Index(list, "(")]
	listed := regexp.MustCompile("`(--[a-z-]+)`").FindAllStringSubmatch(list, -1)
	var inREADME, taken []string
	for _, m := range listed {
		inREADME = append(inREADME, m[1])
	}
	newDev().Flags().VisitAll(func(f *pflag.Flag) { taken = append(taken, "--"+f.Name) })
	sort.Strings(inREADME)
	sort.Strings(taken)
	require.Equal(t, taken, inREADME)
}
