package rawmem_test

//lint:file-ignore U1000 the fields of head and tail are never read: they lay the records out

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/rawmem"
)

// head and rec model the records localcache lays out: bytes, a header in
// the middle of the allocation, then words reached from the header by
// offset, then a tail. Their fields give them their layout only.
type head struct {
	state uint32
	n     uint32
	w     atomic.Uint64
}

type tail struct {
	next *rec
	mark uint64
}

type rec struct {
	key   [24]byte
	h     head
	words [5]atomic.Uint64
	t     tail
}

func TestSizeofOffset(t *testing.T) {
	t.Parallel()
	var r rec
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"byte", rawmem.Sizeof[byte](), 1},
		{"uint64", rawmem.Sizeof[uint64](), 8},
		{"string", rawmem.Sizeof[string](), 16},
		{"head", rawmem.Sizeof[head](), 16},
		{"rec", rawmem.Sizeof[rec](), 24 + 16 + 5*8 + 16},
		{"offset key", rawmem.Offset(&r, &r.key), 0},
		{"offset h", rawmem.Offset(&r, &r.h), 24},
		{"offset words", rawmem.Offset(&r, &r.words), 40},
		{"offset words[3]", rawmem.Offset(&r, &r.words[3]), 64},
		{"offset t", rawmem.Offset(&r, &r.t), 80},
		{"offset t.mark", rawmem.Offset(&r, &r.t.mark), 88},
		{"offset of itself", rawmem.Offset(&r, &r), 0},
	} {
		assert.Equal(t, c.want, c.got, c.name)
	}
}

func TestOffsetOutside(t *testing.T) {
	t.Parallel()
	var r, other rec
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"another value", func() { rawmem.Offset(&r.h, &other.h) }},
		{"before its base", func() { rawmem.Offset(&r.h, &r.key[23]) }},
		{"straddling its end", func() { rawmem.Offset(&r.words[4], &r.t) }},
		{"larger than its base", func() { rawmem.Offset(&r.h, &r) }},
	} {
		assert.PanicsWithValue(t, "rawmem: field outside its base", c.f, c.name)
	}
}

// At and Before reach, from the header, the fields around it: the words
// and the tail after it, the key and its last byte before it.
func TestAtBefore(t *testing.T) {
	t.Parallel()
	r := &rec{}
	copy(r.key[:], "0123456789abcdefghijklmn")
	hs := rawmem.Sizeof[head]()
	for i := range r.words {
		w := rawmem.At[atomic.Uint64](&r.h, hs+uintptr(i)*8)
		require.Same(t, &r.words[i], w, "word %d", i)
		w.Store(uint64(100 + i))
	}
	for i := range r.words {
		assert.Equal(t, uint64(100+i), r.words[i].Load())
	}
	tl := rawmem.At[tail](&r.h, rawmem.Offset(r, &r.t)-rawmem.Offset(r, &r.h))
	require.Same(t, &r.t, tl)
	tl.mark = 7
	assert.Equal(t, uint64(7), r.t.mark)
	require.Same(t, &r.h, rawmem.At[head](&r.h, 0))

	require.Same(t, &r.key, rawmem.Before[[24]byte](&r.h))
	require.Same(t, &r.key[23], rawmem.Before[byte](&r.h))
	assert.Equal(t, byte('n'), *rawmem.Before[byte](&r.h))
	assert.Equal(t, "lmn", rawmem.StringBefore(&r.h, 3))
	assert.Equal(t, "0123456789abcdefghijklmn", rawmem.StringBefore(&r.h, 24))
	assert.Empty(t, rawmem.StringBefore(&r.h, 0))
	assert.Equal(t, "klm", rawmem.StringBefore(rawmem.Before[byte](&r.h), 3))
}

func TestString(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"one byte", []byte("x")},
		{"text", []byte("sluice:{rule:key}:1000000")},
		{"binary", []byte{0, 0xff, '\n', 0x80}},
		{"capacity beyond", append(make([]byte, 0, 64), "abc"...)},
	} {
		s := rawmem.String(c.b)
		assert.Equal(t, string(c.b), s, c.name)
		if len(c.b) > 0 {
			assert.Equal(t, rawmem.Addr(&c.b[0]), rawmem.StringAddr(s), "%s: shares the bytes", c.name)
		}
	}
}

func TestSame(t *testing.T) {
	t.Parallel()
	const k = "rule-name"
	s := strings.Clone(k)
	b := []byte("abcdef")
	whole := rawmem.String(b)
	for _, c := range []struct {
		name string
		a, b string
		want bool
	}{
		{"itself", k, k, true},
		{"a copy of the same constant", k, k[:], true},
		{"a clone", k, s, false},
		{"a prefix", k, k[:4], false},
		{"a substring", k[1:], k[1:], true},
		{"another substring", k[1:4], k[2:5], false},
		{"a view of bytes", whole, rawmem.String(b), true},
		{"bytes converted with a copy", whole, string(b), false},
	} {
		assert.Equal(t, c.want, rawmem.Same(c.a, c.b), c.name)
		if c.want {
			assert.Equal(t, c.a, c.b, "%s: Same implies equal", c.name)
		}
	}
}

// Goroutines running at once see stack addresses at least 2 KiB apart; one
// goroutine sees addresses close together.
func TestStackAddr(t *testing.T) {
	t.Parallel()
	const n = 8
	addrs := make([]uintptr, n)
	var started, done sync.WaitGroup
	started.Add(n)
	done.Add(n)
	release := make(chan struct{})
	for i := range n {
		go func() {
			defer done.Done()
			a := rawmem.StackAddr()
			assert.Less(t, dist(a, rawmem.StackAddr()), uintptr(256), "one goroutine")
			addrs[i] = a
			started.Done()
			<-release // all alive at once: no stack is reused
		}()
	}
	started.Wait()
	close(release)
	done.Wait()
	for i := range addrs {
		for j := range i {
			assert.GreaterOrEqual(t, dist(addrs[i], addrs[j]), uintptr(2048), "goroutines %d and %d", i, j)
		}
	}
}

func dist(a, b uintptr) uintptr {
	if a > b {
		return a - b
	}
	return b - a
}

// Concurrent adders reach the words through At, readers the key through
// StringBefore, while the key is not written: the race detector (with its
// pointer checks, -race turns on checkptr) sees no race and no pointer out
// of its allocation, and no addition is lost.
func TestConcurrentAccess(t *testing.T) {
	t.Parallel()
	r := &rec{}
	copy(r.key[:], "key-of-the-record-000000")
	hs := rawmem.Sizeof[head]()
	const workers, adds = 4, 2000
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := range adds {
				rawmem.At[atomic.Uint64](&r.h, hs+uintptr((g+i)%len(r.words))*8).Add(1)
				if rawmem.StringBefore(&r.h, 24) != "key-of-the-record-000000" {
					t.Error("key changed")
					return
				}
			}
		})
	}
	wg.Wait()
	var sum uint64
	for i := range r.words {
		sum += r.words[i].Load()
	}
	assert.Equal(t, uint64(workers*adds), sum)
}

// FuzzString: a string viewing bytes holds them, shares them, and its
// substrings are Same as the views of the same subslices.
func FuzzString(f *testing.F) {
	for _, s := range []string{"", "a", "sluice:{r:k}:1", "\x00\xff"} {
		f.Add([]byte(s), uint8(0), uint8(1))
	}
	f.Fuzz(func(t *testing.T, b []byte, i, j uint8) {
		s := rawmem.String(b)
		if s != string(b) || len(s) != len(b) {
			t.Fatalf("String(%q) = %q", b, s)
		}
		lo, hi := int(i), int(j)
		if hi > len(b) {
			hi = len(b)
		}
		if lo > hi {
			lo = hi
		}
		if lo < hi && !rawmem.Same(s[lo:hi], rawmem.String(b[lo:hi])) {
			t.Fatalf("s[%d:%d] does not share b[%d:%d]", lo, hi, lo, hi)
		}
		if lo < hi && rawmem.Same(s[lo:hi], string(b[lo:hi])) {
			t.Fatalf("a copy of b[%d:%d] is Same as the view", lo, hi)
		}
	})
}

// FuzzStringBefore: the bytes before a header read back as written, for
// any length the buffer holds, as localcache stores a key and its length.
func FuzzStringBefore(f *testing.F) {
	for _, s := range []string{"", "k", "0123456789abcdefghijklm"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		var r rec
		if len(key) >= len(r.key) {
			key = key[:len(r.key)-1]
		}
		r.key[len(r.key)-1] = byte(len(key))
		copy(r.key[len(r.key)-1-len(key):], key)
		n := rawmem.Before[byte](&r.h)
		got := rawmem.StringBefore(n, int(*n))
		if got != key {
			t.Fatalf("read back %q, wrote %q", got, key)
		}
		if !bytes.Equal(r.key[len(r.key)-1-len(key):len(r.key)-1], []byte(got)) {
			t.Fatalf("%q is not the buffer's bytes", got)
		}
	})
}
