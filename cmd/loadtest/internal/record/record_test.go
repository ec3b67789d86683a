package record

import (
	"bytes"
	"errors"
	"io"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/rawmem"
)

func TestCodec(t *testing.T) {
	in := []Record{{T: -5, Key: 1, Cost: 2, Inst: 3, Flags: Allowed}, {T: 1 << 62, Key: 1<<32 - 1, Cost: 7, Inst: 65535, Flags: Failed | Timed, Early: 255, Lat: 1<<32 - 1}}
	var b bytes.Buffer
	if err := WriteRecords(&b, in); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&b, []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	recs, doc, err := ReadFrame(&b, nil)
	if err != nil || doc != nil || len(recs) != 2 || recs[0] != in[0] || recs[1] != in[1] {
		t.Fatalf("records: %v %s %v", recs, doc, err)
	}
	recs, doc, err = ReadFrame(&b, recs)
	if err != nil || string(doc) != `{"a":1}` || len(recs) != 2 {
		t.Fatalf("json: %v %s %v", recs, doc, err)
	}
	if _, _, err = ReadFrame(&b, nil); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	if _, _, err = ReadFrame(bytes.NewReader([]byte{'X', 0, 0, 0, 0}), nil); !errors.Is(err, ErrFrame) {
		t.Fatalf("bad type: %v", err)
	}
	if _, _, err = ReadFrame(bytes.NewReader([]byte{'R', 1, 0, 0, 0, 1}), nil); !errors.Is(err, ErrFrame) {
		t.Fatalf("short: %v", err)
	}
}

func TestBufferBudget(t *testing.T) {
	budget := NewBudget(2 * ChunkSize)
	a, b := NewBuffer(budget, 10), NewBuffer(budget, 10)
	n := 0
	for a.Add(Record{T: int64(n)}) {
		n++
	}
	if n != 2*ChunkSize-ChunkSize || !budget.Exhausted() {
		// a drew its first chunk at creation, b drew one: a can fill its
		// own chunk only.
		t.Fatalf("a took %d records", n)
	}
	if !b.Add(Record{}) || b.Len() != 1 {
		t.Fatal("b lost its chunk")
	}
	all := a.AppendTo(b.AppendTo(nil))
	if len(all) != n+1 || all[1].T != 0 || all[n].T != int64(n-1) {
		t.Fatalf("append: %d", len(all))
	}
	var got []Record
	c := NewBuffer(nil, 0)
	c.Flush = func(rs []Record) { got = append(got, rs...) }
	for i := range ChunkSize + 3 {
		c.Add(Record{T: int64(i)})
	}
	c.Close()
	if len(got) != ChunkSize+3 || got[ChunkSize+2].T != ChunkSize+2 {
		t.Fatalf("flushed %d", len(got))
	}
}

// A Record stays 24 bytes with its latency (it fills what was padding), and
// its latency is read back only when timed.
func TestRecordLatency(t *testing.T) {
	t.Parallel()
	assert.Equal(t, uintptr(24), rawmem.Sizeof[Record]())
	for _, c := range []struct {
		name  string
		r     Record
		want  time.Duration
		timed bool
	}{
		{"untimed", Record{}, 0, false},
		{"timed", Record{Flags: Timed | Allowed, Lat: 1500}, 1500 * time.Nanosecond, true},
	} {
		d, ok := c.r.Latency()
		assert.Equal(t, c.want, d, c.name)
		assert.Equal(t, c.timed, ok, c.name)
	}
	for _, c := range []struct {
		ns   int64
		want uint32
	}{{-5, 0}, {0, 0}, {123, 123}, {math.MaxUint32, math.MaxUint32}, {math.MaxUint32 + 1, math.MaxUint32}, {math.MaxInt64, math.MaxUint32}} {
		assert.Equal(t, c.want, SaturateLat(c.ns), "%d ns", c.ns)
	}
}

// Spent closes when a buffer is first refused a chunk, not before.
func TestBudgetSpent(t *testing.T) {
	t.Parallel()
	budget := NewBudget(ChunkSize)
	b := NewBuffer(budget, ChunkSize)
	for range ChunkSize {
		require.True(t, b.Add(Record{}))
	}
	select {
	case <-budget.Spent():
		t.Fatal("spent while the chunk had room")
	default:
	}
	assert.False(t, b.Add(Record{}), "a record past the budget")
	select {
	case <-budget.Spent():
	default:
		t.Fatal("not spent once a chunk was refused")
	}
	assert.False(t, NewBuffer(budget, 1).Add(Record{}), "a new buffer on a spent budget")
	// A buffer refused its first chunk spends the budget at its first
	// record, not before.
	small := NewBudget(ChunkSize)
	NewBuffer(small, 1)
	late := NewBuffer(small, 1)
	select {
	case <-small.Spent():
		t.Fatal("spent before a record was refused")
	default:
	}
	assert.False(t, late.Add(Record{}))
	_, open := <-small.Spent()
	assert.False(t, open)
	var none *Budget
	assert.Nil(t, none.Spent(), "a nil budget is never spent")
}
