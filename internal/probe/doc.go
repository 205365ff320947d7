// Package probe holds two questions the runtime and kfaketest both ask a cluster: whether an error
// is a failure to dial a broker at all (DialFailed), and what a broker itself says of some topics,
// not the client's metadata cache (Metadata). It is not part of Tidemark's API.
package probe
