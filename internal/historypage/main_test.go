package historypage_test

import (
	"testing"

	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
