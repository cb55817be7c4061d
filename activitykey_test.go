package harvest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/dedup"
)

func TestActivityKeySubkeysAreTheEngines(t *testing.T) {
	parent := dedup.ActivityKeyFor("01a2423e-b4ab-7ee1-b55f-ab70f06ea45c", 3)
	key := harvest.ActivityKey(parent.String())
	for _, name := range []string{"db", "email", "", "a/b", "100%", "naïve"} {
		require.Equal(t, parent.Subkey(name).String(), key.Subkey(name).String(), "subkey %q", name)
	}
	require.Equal(t, key.String()+"/db/email", key.Subkey("db").Subkey("email").String())
	require.NotEqual(t, key.Subkey("db"), key.Subkey("email"))
}
