package runtime_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/runtime"
)

// Each Outcome prints its name; the zero one, a SettledEvent's Reason outside dead letters, prints
// "none", not "unknown" (helper-109).
func TestOutcomeNames(t *testing.T) {
	var names []string
	for o := range runtime.OutcomeForeignCopy + 2 {
		names = append(names, o.String())
	}
	require.Equal(t, []string{"none", "ack", "drop", "retry", "retry_refused", "decode_failure", "panic",
		"control", "retry_copy", "dead_letter", "spent", "foreign_copy", "unknown"}, names)
}
