package batch

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCutTakesAtMostN(t *testing.T) {
	q := []int{1, 2, 3, 4, 5}
	cases := []struct {
		name       string
		n          int
		take, rest []int
	}{
		{"fewer than n", 10, []int{1, 2, 3, 4, 5}, []int{}},
		{"exactly n", 5, []int{1, 2, 3, 4, 5}, []int{}},
		{"more than n", 2, []int{1, 2}, []int{3, 4, 5}},
		{"n below 1 takes one", 0, []int{1}, []int{2, 3, 4, 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			take, rest := Cut(q, c.n)
			require.Equal(t, c.take, take)
			require.Equal(t, c.rest, rest)
		})
	}
}

// Appending to a batch leaves the rest as it was (helper-78: it wrote over the rest's first element).
func TestAppendingToACutBatchLeavesTheRest(t *testing.T) {
	q := []int{1, 2, 3, 4, 5}
	take, rest := Cut(q, 2)
	take = append(take, 99)
	require.Equal(t, []int{1, 2, 99}, take)
	require.Equal(t, []int{3, 4, 5}, rest)
	require.Equal(t, []int{1, 2, 3, 4, 5}, q)
}

func TestAlignFitsResultsToTheBatch(t *testing.T) {
	e1, retry := errors.New("e1"), errors.New("retry")
	aligned, short, extra := Align([]error{nil, e1}, 3, retry)
	require.Equal(t, []error{nil, e1, retry}, aligned)
	require.Equal(t, 1, short)
	require.Equal(t, 0, extra)

	aligned, short, extra = Align([]error{e1, nil, nil, e1}, 2, retry)
	require.Equal(t, []error{e1, nil}, aligned)
	require.Equal(t, 0, short)
	require.Equal(t, 2, extra)

	aligned, short, extra = Align(nil, 2, retry)
	require.Equal(t, []error{retry, retry}, aligned)
	require.Equal(t, 2, short)
	require.Equal(t, 0, extra)
}

// A negative size is an empty batch: every result is extra, nothing panics.
func TestAlignTakesANegativeSizeAsEmpty(t *testing.T) {
	aligned, short, extra := Align([]error{nil, nil}, -1, errors.New("uncovered"))
	require.Empty(t, aligned)
	require.Equal(t, 0, short)
	require.Equal(t, 2, extra)
}
