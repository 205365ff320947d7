//go:build race

package tracker

// concurrentDeliveries is the total of TestConcurrentCompletionsNeverPassAnUnfinishedDelivery: the
// race detector makes each operation about ten times slower.
const concurrentDeliveries = 200_000
