package benchmarks

import (
	"context"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/rawmem"
)

// TestDistributions checks that each key set of the benchmarks is what its
// name claims: one hot key; 10k keys drawn uniformly; 1M keys drawn with a
// Zipf rank-frequency law of exponent ZipfS, and of ZipfFlatS; a churn set
// whose keys each live a while, ChurnLive at a time.
func TestDistributions(t *testing.T) {
	for _, name := range setNames {
		ks := keySet(name)
		if len(ks.Sample) != len(ks.Idx) || len(ks.Sample)&ks.Mask != 0 || ks.Mask+1 != len(ks.Sample) {
			t.Fatalf("%s: sample of %d draws is not a power of two with mask %d", name, len(ks.Sample), ks.Mask)
		}
		for i := 0; i < len(ks.Sample); i += 997 {
			if ks.Sample[i] != ks.Keys[ks.Idx[i]] || len(ks.Sample[i]) != KeyLen {
				t.Fatalf("%s: draw %d is %q, want key %d %q of %d bytes", name, i, ks.Sample[i], ks.Idx[i], ks.Keys[ks.Idx[i]], KeyLen)
			}
			if rawmem.Same(ks.Sample[i], ks.Keys[ks.Idx[i]]) {
				t.Fatalf("%s: draw %d shares its bytes with the key that fills the limiters; it must be a copy (see KeySet.Sample)", name, i)
			}
		}
	}

	t.Run("hot", func(t *testing.T) {
		ks := keySet("hot")
		if len(ks.Keys) != 1 || ks.Distinct() != 1 {
			t.Fatalf("hot set has %d keys, %d drawn; want 1", len(ks.Keys), ks.Distinct())
		}
	})

	t.Run("10k-uniform", func(t *testing.T) {
		ks := keySet("10k")
		if len(ks.Keys) != 10_000 {
			t.Fatalf("%d keys, want 10000", len(ks.Keys))
		}
		sp := ks.Spread()
		t.Logf("%d draws: per key min %d, max %d, mean %.1f, CV %.4f (Poisson: %.4f), chi²/dof %.3f",
			len(ks.Idx), sp.Min, sp.Max, sp.Mean, sp.CV, 1/math.Sqrt(sp.Mean), sp.ChiSqDoF)
		if sp.Min == 0 {
			t.Error("some key is never drawn")
		}
		// Under uniform draws chi²/dof is 1 ± sqrt(2/dof) (one sigma); allow 6.
		if tol := 6 * math.Sqrt(2/float64(len(ks.Keys)-1)); math.Abs(sp.ChiSqDoF-1) > tol {
			t.Errorf("chi²/dof = %.3f, want 1 ± %.3f: the draws are not uniform", sp.ChiSqDoF, tol)
		}
		if sp.Max > int(sp.Mean+7*math.Sqrt(sp.Mean)) || sp.Min < int(sp.Mean-7*math.Sqrt(sp.Mean)) {
			t.Errorf("counts range %d..%d around a mean of %.1f: too spread for uniform draws", sp.Min, sp.Max, sp.Mean)
		}
	})

	t.Run("1M-zipf", func(t *testing.T) { checkZipf(t, "1M-zipf", ZipfS) })
	t.Run("1M-zipf1.0", func(t *testing.T) { checkZipf(t, "1M-zipf1.0", ZipfFlatS) })

	t.Run("churn", func(t *testing.T) {
		ks := keySet("churn")
		if len(ks.Keys) != ChurnKeys || ks.Live != ChurnLive {
			t.Fatalf("%d keys, %d alive; want %d, %d", len(ks.Keys), ks.Live, ChurnKeys, ChurnLive)
		}
		first, last := ks.Life()
		d := len(ks.Idx)
		// A key is drawn only while the base is within Live of it, which
		// moves by (n-live)/d per draw: its life is at most live·d/(n-live)
		// draws (+1 for rounding).
		life := float64(ChurnLive)*float64(d)/float64(ChurnKeys-ChurnLive) + 1
		var lives, drawn float64
		for i := range first {
			if first[i] < 0 {
				continue
			}
			drawn++
			l := float64(last[i] - first[i])
			lives += l
			if l > life {
				t.Fatalf("key %d lives %v draws, more than %.0f", i, l, life)
			}
		}
		t.Logf("%.0f of %d keys drawn, %.1f draws per key, mean life %.0f draws (at most %.0f)", drawn, len(ks.Keys), float64(d)/drawn, lives/drawn, life)
		if drawn < 0.99*float64(len(ks.Keys)) { // the first and last keys live only partly
			t.Errorf("%.0f of %d keys drawn: the set does not churn through its keys", drawn, len(ks.Keys))
		}
		// The draws in a stretch of a tenth of a life span about Live keys
		// (those alive then): more would mean keys alive too long, fewer
		// keys alive too briefly.
		for _, at := range []int{d / 4, d / 2, 3 * d / 4} {
			seen := map[int32]bool{}
			for _, j := range ks.Idx[at : at+int(life/10)] {
				seen[j] = true
			}
			lo, hi := int32(math.MaxInt32), int32(0)
			for j := range seen {
				lo, hi = min(lo, j), max(hi, j)
			}
			if span := int(hi-lo) + 1; span > ChurnLive*11/10 || span < ChurnLive*9/10 {
				t.Errorf("draws %d…%d span keys %d…%d (%d keys), want about %d alive", at, at+int(life/10), lo, hi, span, ChurnLive)
			}
		}
	})
}

// checkZipf checks that set name's draws follow a Zipf law of exponent zs
// over ZipfKeys keys.
func checkZipf(t *testing.T, name string, zs float64) {
	ks := keySet(name)
	if len(ks.Keys) != ZipfKeys {
		t.Fatalf("%d keys, want %d", len(ks.Keys), ZipfKeys)
	}
	// The slope of log(frequency) against log(rank) over the ranks where
	// counts are large (rank 1000 is drawn about 250 times) is -s.
	slope := ks.RankSlope(1, 1000)
	// Further out, counts are small but the law still holds on average.
	tail := ks.RankSlope(1000, 20000)
	t.Logf("rank-frequency slope %.3f over ranks 1-1000, %.3f over 1000-20000 (want %.2f)", slope, tail, -zs)
	if math.Abs(slope+zs) > 0.05 {
		t.Errorf("rank-frequency slope %.3f over ranks 1-1000, want %.2f ± 0.05", slope, -zs)
	}
	if math.Abs(tail+zs) > 0.1 {
		t.Errorf("rank-frequency slope %.3f over ranks 1000-20000, want %.2f ± 0.1", tail, -zs)
	}
	// The most popular key's share.
	c := ks.Counts()
	top := 0
	for _, x := range c {
		top = max(top, x)
	}
	want := ZipfShare(1, ZipfKeys, zs)
	got := float64(top) / float64(len(ks.Idx))
	t.Logf("top key: %.4f of the draws (want %.4f)", got, want)
	if math.Abs(got-want) > 0.03*want {
		t.Errorf("top key has %.4f of the draws, want %.4f ± 3%%", got, want)
	}
	// The number of distinct keys drawn matches the law: E = Σ 1-(1-p_r)^N.
	var h float64
	for r := 1; r <= ZipfKeys; r++ {
		h += math.Pow(float64(r), -zs)
	}
	var expect float64
	n := float64(len(ks.Idx))
	for r := 1; r <= ZipfKeys; r++ {
		p := math.Pow(float64(r), -zs) / h
		expect += -math.Expm1(n * math.Log1p(-p))
	}
	d := ks.Distinct()
	t.Logf("%d distinct keys drawn (want %.0f)", d, expect)
	if math.Abs(float64(d)-expect) > 0.02*expect {
		t.Errorf("%d distinct keys drawn, want %.0f ± 2%%", d, expect)
	}

	// The remote benchmarks walk the first remoteDraws draws only.
	head := ks.Head(remoteDraws)
	hs := head.RankSlope(1, 100)
	t.Logf("remote head: %d draws, %d distinct keys, slope %.3f over ranks 1-100", len(head.Idx), head.Distinct(), hs)
	if math.Abs(hs+zs) > 0.1 {
		t.Errorf("remote head: rank-frequency slope %.3f over ranks 1-100, want %.2f ± 0.1", hs, -zs)
	}
}

func TestKey(t *testing.T) {
	seen := map[string]bool{}
	for _, i := range []int{0, 1, 9, 10, 999_999, 1_000_000, 12_345_678} {
		k := Key(i)
		if len(k) != KeyLen || !strings.HasPrefix(k, "k:") {
			t.Fatalf("Key(%d) = %q", i, k)
		}
		if n, err := strconv.Atoi(k[2:]); err != nil || n != i || seen[k] {
			t.Fatalf("Key(%d) = %q", i, k)
		}
		seen[k] = true
	}
}

// TestRedisStarter checks the throwaway server: a free loopback port other
// than 6379, INFO parsing, redis-benchmark parsing, and that Stop kills it.
func TestRedisStarter(t *testing.T) {
	r := sharedRedis(t)
	if r.Port == 6379 {
		t.Fatal("started on 6379")
	}
	ctx := context.Background()
	c := r.Client(0)
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if v := r.Version(ctx, c); v == "?" || v == "" {
		t.Fatalf("version %q", v)
	}
	if _, err := NetBytes(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := InfoInt(ctx, c, "memory", "used_memory"); err != nil {
		t.Fatal(err)
	}
	ops, line, err := r.RedisBenchmark(ctx, "-t", "incr", "-n", "2000")
	if err != nil {
		if strings.Contains(err.Error(), "not found") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	if ops <= 0 {
		t.Fatalf("redis-benchmark rate %v from %q", ops, line)
	}

	own, err := StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	addr := own.Addr()
	own.Stop()
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Fatalf("%s still accepts connections after Stop", addr)
	}
}
