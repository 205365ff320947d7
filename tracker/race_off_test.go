//go:build !race

package tracker

// concurrentDeliveries is the total of TestConcurrentCompletionsNeverPassAnUnfinishedDelivery.
const concurrentDeliveries = 2_000_000
