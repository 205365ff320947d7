package runtime

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An outcome wrapped in another error still decides, its own err the cause; of two, the outermost
// decides (the Drop and Retry docs).
func TestClassifyFindsWrappedOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		kind  outcomeKind
		after time.Duration
		cause string // its text; "" for none
	}{
		{"nil", nil, kindAck, 0, ""},
		{"plain", io.EOF, kindRetry, 0, "EOF"},
		{"wrapped drop", fmt.Errorf("charge: %w", Drop(io.EOF)), kindDrop, 0, "EOF"},
		{"wrapped delay", fmt.Errorf("charge: %w", RetryAfter(2*time.Second, io.EOF)), kindRetry, 2 * time.Second, "EOF"},
		{"retry around a drop", Retry(fmt.Errorf("again: %w", Drop(io.EOF))), kindRetry, 0, "again: tidemark: drop: EOF"},
		{"joined", errors.Join(io.ErrUnexpectedEOF, Drop(nil)), kindDrop, 0, "tidemark: dropped"},
		{"joined drop first", errors.Join(Drop(io.EOF), Retry(io.ErrUnexpectedEOF)), kindDrop, 0, "EOF"},
		{"joined retry first", errors.Join(Retry(io.ErrUnexpectedEOF), Drop(io.EOF)), kindRetry, 0, "unexpected EOF"},
		{"retry around a delay", Retry(RetryAfter(2*time.Second, io.EOF)), kindRetry, 0, "tidemark: retry: EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, after, cause := classify(tc.err)
			require.Equal(t, tc.kind, kind)
			require.Equal(t, tc.after, after)
			if tc.cause == "" {
				require.NoError(t, cause)
				return
			}
			require.EqualError(t, cause, tc.cause)
		})
	}
}
