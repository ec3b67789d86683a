package benchmarks

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
)

// KeyLen is the length in bytes of every generated key ("k:" and 14 digits),
// so that memory per key can be reported without the keys themselves, and
// every key string is exactly one 16-byte allocation.
const KeyLen = 16

// Key returns the i-th key of a key set: "k:" followed by i in 14 digits.
func Key(i int) string {
	var b [KeyLen]byte
	b[0], b[1] = 'k', ':'
	for j := KeyLen - 1; j >= 2; j-- {
		b[j] = byte('0' + i%10)
		i /= 10
	}
	return string(b[:])
}

// KeySet is a set of keys and a precomputed sequence of draws from it.
// Benchmarks walk Sample (its length is a power of two, so i&Mask indexes it)
// and never generate keys or random numbers in the timed loop.
type KeySet struct {
	Name string
	Keys []string // the distinct keys
	Idx  []int32  // the draws, as indexes into Keys
	// Sample is the draws: Sample[i] == Keys[Idx[i]], but a copy of it (one
	// per key, shared by its draws). A service looks a key up with the
	// string of each request, never with the one the limiter stored; looked
	// up with the stored string itself, Go's string comparison stops at the
	// equal pointers and never reads the stored bytes, a cache miss that a
	// limiter storing the caller's string (the floor, the peers) would be
	// spared and one storing its own copy (sluice) would not.
	Sample []string
	Mask   int // len(Sample) - 1
	// ZipfS is the Zipf exponent of the draws (0 for uniform and hot sets).
	ZipfS float64
	// Live is, for a churn set, how many keys are alive at any draw (0
	// otherwise). The keys of a churn set are not tracked before timing:
	// each appears in the timed loop, lives a while and is replaced.
	Live int
}

// Zipf parameters of the 1M-key sets: P(rank r) ∝ r^-s over 1M keys, with
// s = ZipfS, and a flatter set with s = ZipfFlatS, under which many more
// distinct keys are touched per sync interval.
const (
	ZipfKeys  = 1_000_000
	ZipfS     = 1.1
	ZipfFlatS = 1.0
)

// Parameters of the churn set: ChurnKeys keys over 2^22 draws, ChurnLive of
// them alive at any draw, so each key is drawn about 16 times over a life of
// about 166k draws.
const (
	ChurnKeys = 1 << 18
	ChurnLive = 10_000
)

// Hot returns a set with one key, drawn every time.
func Hot() *KeySet {
	return build("hot", 1, make([]int32, 1<<10), 0)
}

// Uniform returns n keys drawn uniformly: 2^logDraws draws, seed fixed.
func Uniform(name string, n, logDraws int, seed uint64) *KeySet {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	idx := make([]int32, 1<<logDraws)
	for i := range idx {
		idx[i] = int32(r.IntN(n))
	}
	return build(name, n, idx, 0)
}

// Zipf returns n keys drawn with P(rank r) ∝ r^-s (r = 1..n): 2^logDraws
// draws, seed fixed. Ranks are mapped to keys through a random permutation,
// so a key's popularity is unrelated to its name or to the order in which
// the keys were created (and so allocated).
func Zipf(name string, n int, s float64, logDraws int, seed uint64) *KeySet {
	r := rand.New(rand.NewPCG(seed, 0x21bf))
	var rank func() int
	if s > 1 {
		z := rand.NewZipf(r, s, 1, uint64(n-1))
		rank = func() int { return int(z.Uint64()) }
	} else {
		// rand.Zipf needs s > 1: invert the CDF by binary search.
		cdf := make([]float64, n)
		var sum float64
		for k := range cdf {
			sum += math.Pow(float64(k+1), -s)
			cdf[k] = sum
		}
		rank = func() int {
			i, _ := slices.BinarySearch(cdf, r.Float64()*sum)
			return min(i, n-1)
		}
	}
	perm := r.Perm(n)
	idx := make([]int32, 1<<logDraws)
	for i := range idx {
		idx[i] = int32(perm[rank()])
	}
	ks := build(name, n, idx, s)
	return ks
}

// Churn returns n keys of which live are alive at any draw: draw i is
// uniform over the keys base(i) … base(i)+live-1, where base(i) = i·(n-live)/2^logDraws
// moves from the first key to the last over the sample. A key appears when
// the base comes within live of it, is drawn about live·2^logDraws/(n-live)/live
// times while alive, and is gone once the base passes it. Keys appear in
// the order of their names, that is of their index.
func Churn(name string, n, live, logDraws int, seed uint64) *KeySet {
	r := rand.New(rand.NewPCG(seed, 0xc4a2))
	d := 1 << logDraws
	idx := make([]int32, d)
	for i := range idx {
		base := int(int64(i) * int64(n-live) / int64(d))
		idx[i] = int32(base + r.IntN(live))
	}
	ks := build(name, n, idx, 0)
	ks.Live = live
	return ks
}

// Life returns the first and last draw of each key (-1 for a key never
// drawn).
func (ks *KeySet) Life() (first, last []int) {
	first, last = make([]int, len(ks.Keys)), make([]int, len(ks.Keys))
	for i := range first {
		first[i], last[i] = -1, -1
	}
	for i, j := range ks.Idx {
		if first[j] < 0 {
			first[j] = i
		}
		last[j] = i
	}
	return first, last
}

func build(name string, n int, idx []int32, s float64) *KeySet {
	ks := &KeySet{Name: name, Keys: make([]string, n), Idx: idx, Sample: make([]string, len(idx)), Mask: len(idx) - 1, ZipfS: s}
	probe := make([]string, n)
	for i := range ks.Keys {
		ks.Keys[i] = Key(i)
		probe[i] = Key(i) // a separate allocation: see Sample
	}
	for i, j := range idx {
		ks.Sample[i] = probe[j]
	}
	return ks
}

// Start returns a starting position in the sample for the g-th goroutine of
// a parallel benchmark: far apart, so goroutines do not walk in lockstep.
func (ks *KeySet) Start(g uint64) int {
	return int((g * 0x9E3779B97F4A7C15) >> 20 & uint64(ks.Mask))
}

// Head returns the set restricted to its first n draws (n a power of two):
// the same keys, a shorter sample.
func (ks *KeySet) Head(n int) *KeySet {
	if n >= len(ks.Idx) {
		return ks
	}
	h := *ks
	h.Idx, h.Sample, h.Mask = ks.Idx[:n], ks.Sample[:n], n-1
	return &h
}

// Drawn returns the distinct keys the sample draws, in order of first draw.
func (ks *KeySet) Drawn() []string {
	seen := make([]bool, len(ks.Keys))
	var keys []string
	for _, j := range ks.Idx {
		if !seen[j] {
			seen[j] = true
			keys = append(keys, ks.Keys[j])
		}
	}
	return keys
}

// Counts returns how often each key was drawn.
func (ks *KeySet) Counts() []int {
	c := make([]int, len(ks.Keys))
	for _, j := range ks.Idx {
		c[j]++
	}
	return c
}

// Distinct returns the number of distinct keys drawn.
func (ks *KeySet) Distinct() int {
	n := 0
	for _, c := range ks.Counts() {
		if c > 0 {
			n++
		}
	}
	return n
}

// RankSlope fits log(frequency) = a + slope·log(rank) by least squares over
// the ranks first..last (1-based) of the draws sorted by frequency, and
// returns the slope: about -s for a Zipf(s) sample.
func (ks *KeySet) RankSlope(first, last int) float64 {
	c := ks.Counts()
	slices.SortFunc(c, func(a, b int) int { return b - a })
	var sx, sy, sxx, sxy, n float64
	for r := first; r <= last && r <= len(c); r++ {
		if c[r-1] == 0 {
			break
		}
		x, y := math.Log(float64(r)), math.Log(float64(c[r-1]))
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
		n++
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

// Spread describes how evenly the draws cover the keys.
type Spread struct {
	Min, Max int     // fewest and most draws of one key
	Mean     float64 // draws per key
	CV       float64 // coefficient of variation of the counts
	ChiSqDoF float64 // Pearson's chi-square against uniform, per degree of freedom (≈1 when uniform)
}

// Spread returns the spread of the draws over the keys.
func (ks *KeySet) Spread() Spread {
	c := ks.Counts()
	mean := float64(len(ks.Idx)) / float64(len(c))
	sp := Spread{Min: math.MaxInt, Mean: mean}
	var chi float64
	for _, x := range c {
		sp.Min = min(sp.Min, x)
		sp.Max = max(sp.Max, x)
		d := float64(x) - mean
		chi += d * d / mean
	}
	if len(c) > 1 {
		sp.ChiSqDoF = chi / float64(len(c)-1)
	}
	sp.CV = math.Sqrt(chi/float64(len(c))) / math.Sqrt(mean)
	return sp
}

// ZipfShare returns the probability of rank r under Zipf(s) over n keys.
func ZipfShare(r, n int, s float64) float64 {
	var h float64
	for k := 1; k <= n; k++ {
		h += math.Pow(float64(k), -s)
	}
	return math.Pow(float64(r), -s) / h
}

// Describe is a one-line description of the set for the report.
func (ks *KeySet) Describe() string {
	switch {
	case len(ks.Keys) == 1:
		return "1 hot key"
	case ks.Live > 0:
		return fmt.Sprintf("%s keys, churn: %s alive at a time, uniform over them, each appearing in the timed loop; %s precomputed draws", human(len(ks.Keys)), human(ks.Live), human(len(ks.Idx)))
	case ks.ZipfS > 0:
		return fmt.Sprintf("%s keys, Zipf s=%g, %s precomputed draws", human(len(ks.Keys)), ks.ZipfS, human(len(ks.Idx)))
	}
	return fmt.Sprintf("%s keys, uniform, %s precomputed draws", human(len(ks.Keys)), human(len(ks.Idx)))
}

func human(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "Mi"
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "Ki"
	case n >= 1000 && n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}
