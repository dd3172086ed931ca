package actors

import (
	"encoding/hex"
	"math/rand/v2"
	"time"
)

// IDGen makes UUIDv7 job ids from the actor's clock and seeded random
// source: time-ordered, so inserts stay at the right edge of the id index,
// and reproducible in a simulation. Within one millisecond a counter in the
// rand_a bits keeps ids of one generator increasing.
type IDGen struct {
	rng    *rand.Rand
	lastMS int64
	seq    uint16
}

// NewIDGen returns a generator drawing randomness from rng.
func NewIDGen(rng *rand.Rand) *IDGen { return &IDGen{rng: rng} }

// New returns an id for a job enqueued at now.
func (g *IDGen) New(now time.Time) string {
	ms := now.UnixMilli()
	if ms <= g.lastMS {
		ms = g.lastMS // a clock step back keeps ids increasing
		g.seq++
		if g.seq >= 1<<12 {
			ms++
			g.seq = 0
		}
	} else {
		g.seq = uint16(g.rng.Uint32() & 0x3ff) // leave room to count up
	}
	g.lastMS = ms
	var b [16]byte
	b[0], b[1], b[2], b[3], b[4], b[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	b[6] = 0x70 | byte(g.seq>>8)&0x0f
	b[7] = byte(g.seq)
	r := g.rng.Uint64()
	for i := 8; i < 16; i++ {
		b[i] = byte(r >> (8 * (i - 8)))
	}
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}
