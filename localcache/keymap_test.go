package localcache

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kmOp is an operation on a key map: 0 insert, 1 delete, 2 replace, 3
// replace of an entry that is not the key's; on keys[key].
type kmOp struct {
	op  byte
	key int
}

// kmOps applies ops to a keyMap and to a Go map, and requires them to agree
// after each one and at the end: on every key's entry, the length and what
// Range visits.
func kmOps(t *testing.T, keys []string, ops []kmOp) {
	t.Helper()
	_, alloc := entryAllocator(2, false)
	m := newKeyMap()
	ref := map[string]*hdr{}
	for _, o := range ops {
		key := keys[o.key%len(keys)]
		cur := ref[key]
		switch o.op % 4 {
		case 0:
			e, inserted := m.LoadOrInsert(key, func() *hdr { return alloc(key) })
			if (cur == nil) != inserted || cur != nil && cur != e {
				require.Equal(t, cur == nil, inserted, "insert %q", key)
				require.Same(t, cur, e)
			}
			ref[key] = e
		case 1:
			if cur != nil {
				m.Delete(key, cur)
				delete(ref, key)
			}
		case 2:
			fresh := alloc(key)
			if !m.Replace(key, cur, fresh) {
				require.Fail(t, "replace of key's own entry failed", "key %q", key)
			}
			ref[key] = fresh
		case 3:
			stale := alloc(key)
			done := m.Replace(key, stale, alloc(key))
			if (cur == nil) != done {
				require.Equal(t, cur == nil, done, "replace of an entry that is not key's")
			}
			if done {
				ref[key] = m.Load(key)
			}
		}
		// The checks of every operation call testify only on a failure:
		// its reflection would be most of the test's time.
		if got, e := m.Load(key), ref[key]; got != e {
			require.Same(t, e, got, "load %q", key)
		}
	}
	require.Equal(t, len(ref), m.Len())
	seen := map[string]*hdr{}
	m.Range(func(e *hdr) bool {
		k := keyOf(e)
		if _, twice := seen[k]; twice { // testify's NotContains reflects over the whole map
			require.Fail(t, "visited twice", "key %q", k)
		}
		seen[k] = e
		return true
	})
	require.Equal(t, ref, seen)
	for _, k := range keys {
		require.Equal(t, ref[k], m.Load(k), "load %q", k)
	}
}

// kmKeys returns n distinct keys of lengths from 0 to 100 bytes, and two
// that differ in their last byte only.
func kmKeys(n int) []string {
	keys := []string{"", strings.Repeat("a", 100), strings.Repeat("a", 99) + "b"}
	for i := len(keys); i < n; i++ {
		keys = append(keys, fmt.Sprintf("%d:%s", i, strings.Repeat("x", i%90)))
	}
	return keys
}

// TestKeyMapReference: random operations agree with a Go map, through
// growth from 8 buckets to thousands of keys and shrinking back as most are
// deleted.
func TestKeyMapReference(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		keys int
		ops  int
	}{
		{"few keys, many reuses of deleted slots", 20, 20000},
		{"grow and shrink", 5000, 200000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(tc.keys), 7))
			keys := kmKeys(tc.keys)
			ops := make([]kmOp, 0, tc.ops)
			for i := range tc.ops {
				op := byte(0) // mostly inserts first, then mostly the others
				if r := rng.IntN(10); i > tc.ops/2 && r < 6 || i <= tc.ops/2 && r < 2 {
					op = byte(1 + rng.IntN(3))
				}
				ops = append(ops, kmOp{op, rng.IntN(len(keys))})
			}
			kmOps(t, keys, ops)
		})
	}
}

// TestKeyMapRacingInserts: goroutines racing to insert one key all get the
// one entry inserted, whoever built the others; Replace gives a key without
// an entry one, and replaces only the entry it is told.
func TestKeyMapRacingInserts(t *testing.T) {
	t.Parallel()
	_, alloc := entryAllocator(2, true)
	m := newKeyMap()
	e, inserted := m.LoadOrInsert("a", func() *hdr { return alloc("a") })
	require.True(t, inserted)
	assert.False(t, m.Replace("a", alloc("a"), alloc("a")), "not a's entry")
	assert.Same(t, e, m.Load("a"))
	assert.True(t, m.Replace("a", e, alloc("a")))
	assert.True(t, m.Replace("b", nil, alloc("b")), "a key without an entry gets one")

	const racers = 8
	got := make([]*hdr, racers)
	var wins atomic.Int64
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			e, inserted := m.LoadOrInsert("race", func() *hdr { return alloc("race") })
			got[i] = e
			if inserted {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(1), wins.Load(), "one insertion")
	for i := range got {
		assert.Same(t, m.Load("race"), got[i], "racer %d", i)
	}
	assert.Equal(t, 3, m.Len())
}

// TestKeyMapConcurrent: loads that race with insertions, deletions,
// replacements and rebuilds always find the keys that stay, and never return
// another key's entry (run it with -race).
func TestKeyMapConcurrent(t *testing.T) {
	t.Parallel()
	_, alloc := entryAllocator(2, true)
	m := newKeyMap()
	stay := kmKeys(500)
	for _, k := range stay {
		m.LoadOrInsert(k, func() *hdr { return alloc(k) })
	}
	var stop atomic.Bool
	var wrong atomic.Int64
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := r; !stop.Load(); i++ {
				k := stay[i%len(stay)]
				if e := m.Load(k); e == nil || keyOf(e) != k {
					wrong.Add(1)
				}
				if e := m.Load(fmt.Sprintf("churn-%d", i%3000)); e != nil && !strings.HasPrefix(keyOf(e), "churn-") {
					wrong.Add(1)
				}
			}
		}()
	}
	for round := range 5 {
		churn := make([]string, 3000)
		for i := range churn {
			churn[i] = fmt.Sprintf("churn-%d", i)
			m.LoadOrInsert(churn[i], func() *hdr { return alloc(churn[i]) })
		}
		for i, k := range churn {
			if i%2 == round%2 {
				m.Replace(k, m.Load(k), alloc(k))
			}
			m.Delete(k, m.Load(k))
		}
	}
	stop.Store(true)
	wg.Wait()
	assert.Zero(t, wrong.Load())
	assert.Equal(t, len(stay), m.Len())
}

// FuzzKeyMap: any sequence of operations on any keys agrees with a Go map.
func FuzzKeyMap(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 1, 2, 2, 3, 0}, "a,b,,ccc")
	f.Add([]byte{0, 0, 0, 1, 0, 2, 1, 0, 1, 1, 0, 0}, strings.Repeat("k,", 40))
	f.Fuzz(func(t *testing.T, ops []byte, keyList string) {
		keys := strings.Split(keyList, ",")
		if len(keys) > 256 {
			keys = keys[:256]
		}
		// Distinct keys: a Go map and the keyMap see the same key set.
		seen := map[string]bool{}
		distinct := keys[:0]
		for _, k := range keys {
			if !seen[k] {
				seen[k] = true
				distinct = append(distinct, k)
			}
		}
		var kops []kmOp
		for i := 0; i+1 < len(ops); i += 2 {
			kops = append(kops, kmOp{ops[i], int(ops[i+1])})
		}
		kmOps(t, distinct, kops)
	})
}
