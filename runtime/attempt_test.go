package runtime

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// A forged retry count of MaxCount (math.MaxInt32) plus in-place retries is an attempt number past
// int32: on a 32-bit platform, where int has 32 bits, it saturates at math.MaxInt instead of
// wrapping to a negative attempt that no MaxAttempts cap would ever reach (the record was copied
// forever; helper-64). attemptSum is checked with a 32-bit limit, so that this test fails on any
// platform without the clamp; attempt itself with the platform's limit.
func TestAnAttemptNumberSaturatesInsteadOfWrapping(t *testing.T) {
	require.Equal(t, int64(math.MaxInt32), attemptSum(math.MaxInt32, math.MaxInt32, 5, 0))
	require.Equal(t, int64(math.MaxInt32), attemptSum(math.MaxInt32, math.MaxInt32-3, 2, 1))
	require.Equal(t, int64(9), attemptSum(math.MaxInt32, 3, 2, 3))
	got, _ := (&consumer{}).attempt(&item{copies: math.MaxInt32, inPlace: 5})
	require.Equal(t, int(min(int64(math.MaxInt32)+6, int64(math.MaxInt))), got)
	require.Positive(t, got)
}
