package runtime

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// A forged retry count of MaxCount (math.MaxInt32) plus in-place retries is an attempt number past
// int32: on a 32-bit platform, where int has 32 bits, it saturates at math.MaxInt instead of
// wrapping to a negative attempt that no MaxAttempts cap would ever reach (the record would be
// copied forever).
func TestAnAttemptNumberSaturatesInsteadOfWrapping(t *testing.T) {
	got, _ := (&consumer{}).attempt(&item{copies: math.MaxInt32, inPlace: 5})
	require.Equal(t, int(min(int64(math.MaxInt32)+6, int64(math.MaxInt))), got)
	require.Positive(t, got)
}
