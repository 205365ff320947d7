// Package tracker computes, per partition, the next offset a consumer group may commit, without
// locks on the hot path.
package tracker
