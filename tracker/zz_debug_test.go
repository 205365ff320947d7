package tracker

import (
	"fmt"
	"sync"
)

var zzResults sync.Map

func (p *Partition) dump() string {
	h := p.head.Load()
	s := fmt.Sprintf("head=%d tail=%d start=%d version=%d headSeen=%d\n", h, p.tail, p.start.Load(), p.version.Load(), p.headSeen)
	for seq := h - 3; seq < h+5 && seq < p.tail+2; seq++ {
		w := p.ring[seq&p.mask].word.Load()
		r, _ := zzResults.Load(seq)
		s += fmt.Sprintf("  slot seq %d: word seq %d state %d contig %v off %d result %v\n", seq, seqOf(w), stateOf(w), w&contiguousBit != 0, p.ring[seq&p.mask].offset.Load(), r)
	}
	return s
}
