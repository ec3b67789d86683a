// Package record holds the load test's admission records: one per check, kept
// in per-goroutine chunked buffers so that recording takes no lock, and a
// compact binary encoding to stream them from child processes to the parent.
package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Flags of a Record.
const (
	// Allowed marks an admitted check.
	Allowed uint8 = 1 << iota
	// Failed marks a check whose Allow returned an error (the decision, a
	// denial unless the failure mode admitted it, is still recorded).
	Failed
	// Slow marks a check that took long enough to have waited for Redis
	// (set only when every check is timed, a diagnosis mode).
	Slow
	// Timed marks a check whose Allow call was timed: Lat holds its
	// latency (every check of a paced profile, 1 in 64 flat out).
	Timed
	// RoundTrip marks a timed check during whose call its instance began
	// a round trip of checks handed to Redis or had one decided there
	// (Limiter.Stats: Sync.UrgentCycles, Sync.Reservations). A check that
	// waited for Redis always has it; a slow check without it waited for
	// a CPU, not for Redis.
	RoundTrip
)

// Record is one check as the fleet decided it.
type Record struct {
	// T is the decision time on the store clock, in ns since the Unix epoch.
	T int64
	// Key is the key's index in the run's key space.
	Key uint32
	// Cost is the check's cost.
	Cost uint32
	// Inst is the instance that decided the check.
	Inst uint16
	// Flags holds Allowed and Failed.
	Flags uint8
	// Early is how many periods (sub-windows; the window for a fixed
	// window) before T the decision may also have been made at: 0 when T
	// is certain. A window's decision time is recovered modulo a period
	// from Decision.ResetAfter; a call that took longer than that (a check
	// waiting for Redis, a goroutine waiting for a CPU) leaves several
	// candidates, T being the latest.
	Early uint8
	// Lat is the Allow call's latency in ns, saturated at 2^32−1 (about
	// 4.3 s), when Flags has Timed; 0 otherwise. It fills what would be
	// padding: a Record is 24 bytes with it or without it.
	Lat uint32
}

// Latency returns the check's latency and whether it was timed.
func (r Record) Latency() (time.Duration, bool) {
	return time.Duration(r.Lat), r.Flags&Timed != 0
}

// SaturateLat returns ns as a Lat: 0 below 0, 2^32−1 above it.
func SaturateLat(ns int64) uint32 { return uint32(min(max(ns, 0), math.MaxUint32)) }

// Admitted reports whether the check was admitted.
func (r Record) Admitted() bool { return r.Flags&Allowed != 0 }

// Size is the encoded size of one Record.
const Size = 24

// ChunkSize is the number of records in one buffer chunk.
const ChunkSize = 1 << 15

// Budget bounds the records a run keeps, across all buffers; buffers take
// whole chunks from it, so the recording path touches it once a chunk.
type Budget struct {
	left  atomic.Int64
	spent chan struct{}
	once  sync.Once
}

// NewBudget returns a budget of max records (rounded up to whole chunks).
func NewBudget(max int64) *Budget {
	b := &Budget{spent: make(chan struct{})}
	b.left.Store(max)
	return b
}

// take reserves n records; it reports false when the budget is spent.
func (b *Budget) take(n int64) bool {
	if b == nil {
		return true
	}
	return b.left.Add(-n) > -n
}

// refuse records that a buffer refused a record: the budget is spent.
func (b *Budget) refuse() {
	if b != nil {
		b.once.Do(func() { close(b.spent) })
	}
}

// Spent returns a channel closed when a buffer first refuses a record for
// want of a chunk (Add returns false): the run should end then, for every
// worker at once (nil for a nil budget). A buffer made on a spent budget
// refuses its first record.
func (b *Budget) Spent() <-chan struct{} {
	if b == nil {
		return nil
	}
	return b.spent
}

// Exhausted reports whether a buffer was refused a chunk.
func (b *Budget) Exhausted() bool { return b != nil && b.left.Load() <= 0 }

// Buffer collects the records of one goroutine. It is not safe for concurrent
// use: each worker owns one.
type Buffer struct {
	budget *Budget
	full   [][]Record
	cur    []Record
	// Flush, if set, receives each full chunk instead of the buffer keeping
	// it (a child process streams chunks to its parent).
	Flush func([]Record)
}

// NewBuffer returns a buffer drawing on budget (nil: unbounded) with room for
// about expect records allocated up front.
func NewBuffer(budget *Budget, expect int) *Buffer {
	b := &Buffer{budget: budget}
	n := min(max(expect, 1024), ChunkSize)
	if budget.take(int64(ChunkSize)) {
		b.cur = make([]Record, 0, n)
	}
	return b
}

// Add appends r; it reports false, dropping r, when the budget is spent.
func (b *Buffer) Add(r Record) bool {
	if len(b.cur) == cap(b.cur) && !b.grow() {
		return false
	}
	b.cur = append(b.cur, r)
	return true
}

func (b *Buffer) grow() bool {
	if cap(b.cur) > 0 && cap(b.cur) < ChunkSize {
		// The first chunk was allocated small: widen it without a new
		// budget draw (it drew a whole chunk).
		nc := make([]Record, len(b.cur), ChunkSize)
		copy(nc, b.cur)
		b.cur = nc
		return true
	}
	if cap(b.cur) > 0 {
		if b.Flush != nil {
			b.Flush(b.cur)
		} else {
			b.full = append(b.full, b.cur)
		}
		b.cur = nil
	}
	if !b.budget.take(ChunkSize) {
		b.budget.refuse()
		return false
	}
	b.cur = make([]Record, 0, ChunkSize)
	return true
}

// Close hands the last partial chunk to Flush, if set.
func (b *Buffer) Close() {
	if b.Flush != nil && len(b.cur) > 0 {
		b.Flush(b.cur)
		b.cur = nil
	}
}

// Len returns the number of records held.
func (b *Buffer) Len() int {
	n := len(b.cur)
	for _, c := range b.full {
		n += len(c)
	}
	return n
}

// AppendTo appends every record held to dst.
func (b *Buffer) AppendTo(dst []Record) []Record {
	for _, c := range b.full {
		dst = append(dst, c...)
	}
	return append(dst, b.cur...)
}

// Frame types of the child-to-parent stream.
const (
	// FrameRecords is followed by a uint32 count and that many records.
	FrameRecords byte = 'R'
	// FrameJSON is followed by a uint32 length and a JSON document.
	FrameJSON byte = 'J'
)

// maxFrame bounds a frame's payload, so a corrupt stream cannot make the
// reader allocate without limit.
const maxFrame = 64 << 20

// WriteRecords writes one FrameRecords frame.
func WriteRecords(w io.Writer, rs []Record) error {
	buf := make([]byte, 5+len(rs)*Size)
	buf[0] = FrameRecords
	binary.LittleEndian.PutUint32(buf[1:], uint32(len(rs)))
	p := buf[5:]
	for _, r := range rs {
		binary.LittleEndian.PutUint64(p, uint64(r.T))
		binary.LittleEndian.PutUint32(p[8:], r.Key)
		binary.LittleEndian.PutUint32(p[12:], r.Cost)
		binary.LittleEndian.PutUint16(p[16:], r.Inst)
		p[18] = r.Flags
		p[19] = r.Early
		binary.LittleEndian.PutUint32(p[20:], r.Lat)
		p = p[Size:]
	}
	_, err := w.Write(buf)
	return err
}

// WriteJSON writes one FrameJSON frame holding doc (already encoded).
func WriteJSON(w io.Writer, doc []byte) error {
	var h [5]byte
	h[0] = FrameJSON
	binary.LittleEndian.PutUint32(h[1:], uint32(len(doc)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(doc)
	return err
}

// ErrFrame reports a malformed stream.
var ErrFrame = errors.New("record: malformed frame")

// ReadFrame reads the next frame: records are appended to recs, a JSON
// document is returned in doc. It returns io.EOF at a clean end of stream.
func ReadFrame(r io.Reader, recs []Record) (out []Record, doc []byte, err error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:1]); err != nil {
		return recs, nil, err
	}
	if _, err := io.ReadFull(r, h[1:]); err != nil {
		return recs, nil, fmt.Errorf("%w: %v", ErrFrame, err)
	}
	n := binary.LittleEndian.Uint32(h[1:])
	switch h[0] {
	case FrameRecords:
		if uint64(n)*Size > maxFrame {
			return recs, nil, fmt.Errorf("%w: %d records in one frame", ErrFrame, n)
		}
		buf := make([]byte, int(n)*Size)
		if _, err := io.ReadFull(r, buf); err != nil {
			return recs, nil, fmt.Errorf("%w: %v", ErrFrame, err)
		}
		for p := buf; len(p) >= Size; p = p[Size:] {
			recs = append(recs, Record{
				T:     int64(binary.LittleEndian.Uint64(p)),
				Key:   binary.LittleEndian.Uint32(p[8:]),
				Cost:  binary.LittleEndian.Uint32(p[12:]),
				Inst:  binary.LittleEndian.Uint16(p[16:]),
				Flags: p[18],
				Early: p[19],
				Lat:   binary.LittleEndian.Uint32(p[20:]),
			})
		}
		return recs, nil, nil
	case FrameJSON:
		if n > maxFrame {
			return recs, nil, fmt.Errorf("%w: %d-byte document", ErrFrame, n)
		}
		doc = make([]byte, n)
		if _, err := io.ReadFull(r, doc); err != nil {
			return recs, nil, fmt.Errorf("%w: %v", ErrFrame, err)
		}
		return recs, doc, nil
	}
	return recs, nil, fmt.Errorf("%w: type %q", ErrFrame, h[0])
}
