// Package dlq builds dead-letter records: a copy of a spent or dropped record for a dead-letter
// topic, with provenance headers naming the original record (DESIGN §3.3).
//
// # Provenance
//
// A dead-letter record carries the retry headers of a copy (count, origin) and TopicHeader,
// PartitionHeader, OffsetHeader and TimestampHeader naming the ORIGINAL record (from the origin
// headers when the spent delivery was itself a copy), GroupHeader, ErrorHeader (the handler's
// error text, at most 1 KiB) and AttemptsHeader. Key and value are kept byte for byte.
package dlq
