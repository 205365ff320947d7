// Command realkafka is run.sh's helper: it picks free loopback ports and waits until a freshly
// started Kafka cluster serves everything the conformance suite uses (topics, produce, group
// coordinators, transactions), so the first scenario does not pay for the internal topics.
//
//	realkafka ports N                     print N free 127.0.0.1 ports, one a line
//	realkafka ready -n N -timeout D SEEDS  wait until N brokers answer, then warm the cluster up
//
// It is not a library: see run.sh and docs/realkafka.md.
package main
