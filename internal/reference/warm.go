package reference

import (
	"math"

	"github.com/sluicehq/sluice/window"
)

// WarmSteps is the resolution of the stored permits of a warm-up state as
// package localcache packs it into 20 bits (less the codes it reserves):
// they are kept as a multiple of MaxPermits/WarmSteps. Its tests pin it to
// the table's.
const WarmSteps = 1<<20 - 4

// RoundWarm returns s with its stored permits rounded to the nearest
// multiple of u.MaxPermits/WarmSteps: the state as it survives packing. A
// window.WarmUp whose states are rounded after every admission decides
// exactly what the packed state decides.
func RoundWarm(u window.WarmUnit, s window.Warm) window.Warm {
	q := math.Round(s.Stored * (WarmSteps / u.MaxPermits))
	q = min(max(q, 0), WarmSteps)
	s.Stored = q * (u.MaxPermits / WarmSteps)
	return s
}
