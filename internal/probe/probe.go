package probe

import (
	"context"
	"errors"
	"net"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrNoBroker is Metadata's error when cl has discovered no broker yet.
var ErrNoBroker = errors.New("probe: no broker discovered")

// DialFailed reports whether err is a failure to dial a broker: no connection at all (refused,
// unreachable, a timeout, a name that does not resolve), not one a broker's TLS answered.
func DialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Metadata asks one of cl's brokers directly for the metadata of topics, so the answer is the
// broker's: the client's own metadata requests may be answered from its cache (kgo's
// MetadataMinAge), which lags a topic's deletion or new partitions. It returns the response, or
// the request's error, or ErrNoBroker.
func Metadata(ctx context.Context, cl *kgo.Client, topics ...string) (*kmsg.MetadataResponse, error) {
	brokers := cl.DiscoveredBrokers()
	if len(brokers) == 0 {
		return nil, ErrNoBroker
	}
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	return req.RequestWith(ctx, brokers[0])
}
