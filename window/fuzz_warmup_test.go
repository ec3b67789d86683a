package window

import (
	"math"
	"testing"
	"time"
)

// validWarmUp reports whether window, limit, burst and warmup are a
// warm-up rule that policy.Rule.Validate accepts: T = Window/Limit of at
// least 1ms, Burst·T at most a day, a warm-up from 1µs to 65536·T and at
// most 366 days.
func validWarmUp(win, limit, burst, warmup int64) bool {
	const maxWindow = int64(366 * 24 * time.Hour)
	if win < int64(time.Millisecond) || win > maxWindow || limit < 1 || limit > win/int64(time.Millisecond) ||
		burst < 0 || burst > 1<<32-1 {
		return false
	}
	if burst == 0 {
		burst = limit
	}
	tn := (win + limit/2) / limit
	return warmup >= int64(time.Microsecond) && warmup <= 65536*tn && warmup <= maxWindow &&
		burst <= int64(24*time.Hour)/tn
}

// FuzzWarmUp: for any valid warm-up rule and any sequence of arrival gaps
// and costs, WarmUp.Check never panics, admits exactly when the documented
// test on Guava's state does and then moves the state as Guava's
// reserveEarliestAvailable (the guava reference), keeps its stored permits
// in [0, MaxPermits] and its debt within 3·Burst·T, reports a Remaining
// that is the largest cost admitted, and its RetryAfter is exact.
func FuzzWarmUp(f *testing.F) {
	f.Add(int64(time.Second), int64(10), int64(0), int64(5*time.Second), []byte{0, 1, 2, 3, 255, 7})
	f.Add(int64(time.Minute), int64(1000), int64(3), int64(time.Minute), []byte{0, 0, 0, 0, 0})
	f.Add(int64(time.Hour), int64(1), int64(1), int64(time.Millisecond), []byte{9, 200})
	f.Fuzz(func(t *testing.T, win, limit, burst, warmup int64, seq []byte) {
		if !validWarmUp(win, limit, burst, warmup) {
			return
		}
		tn := (win + limit/2) / limit
		w := NewWarmUp(time.Duration(win), time.Duration(warmup), limit, burst)
		now := int64(1_800_000_000) * int64(time.Second)
		ref := newGuava(time.Duration(win), time.Duration(warmup), limit, micros(now))
		s := w.Fresh(now)
		for i := 0; i+1 < len(seq); i += 2 {
			now += int64(seq[i]) * tn / 16
			n := 1 + int64(seq[i+1])%w.burst
			room := int64(math.Floor(float64(w.burst-n) * ref.stableIntervalMicros))
			want := max(ref.nextFreeTicketMicros-micros(now), 0) <= room
			next, ok, rem, _, retry := w.Check(s, now, n)
			if ok != want {
				t.Fatalf("Check admits %v, the reference %v (n=%d, state %+v)", ok, want, n, s)
			}
			if ok {
				if retry != 0 {
					t.Fatalf("admitted with RetryAfter %v", retry)
				}
				ref.reserveEarliestAvailable(n, micros(now))
				s = next
			} else {
				if next != s {
					t.Fatalf("denied, yet the state moved: %+v to %+v", s, next)
				}
				if retry <= 0 {
					t.Fatalf("denied with RetryAfter %v", retry)
				}
				if _, ok, _, _, _ := w.Check(s, now+int64(retry)-1, n); ok {
					t.Fatalf("admitted 1ns before RetryAfter %v", retry)
				}
				if _, ok, _, _, _ := w.Check(s, now+int64(retry), n); !ok {
					t.Fatalf("denied at RetryAfter %v", retry)
				}
			}
			if s.Next != ref.nextFreeTicketMicros || s.Stored != ref.storedPermits {
				t.Fatalf("state %+v, the reference {%d %v}", s, ref.nextFreeTicketMicros, ref.storedPermits)
			}
			if s.Stored < 0 || s.Stored > w.maxP || math.IsNaN(s.Stored) {
				t.Fatalf("stored permits %v out of [0, %v]", s.Stored, w.maxP)
			}
			if d := s.Next - micros(now); float64(d) > 3*float64(w.burst)*w.stable+1 {
				t.Fatalf("debt %dµs beyond 3·Burst·T", d)
			}
			if rem < 0 || rem > w.burst {
				t.Fatalf("Remaining %d", rem)
			}
			if _, ok, _, _, _ := w.Check(s, now, rem); rem > 0 && !ok {
				t.Fatalf("Remaining %d not admitted", rem)
			}
			if _, ok, _, _, _ := w.Check(s, now, rem+1); rem < w.burst && ok {
				t.Fatalf("Remaining+1 = %d admitted", rem+1)
			}
		}
	})
}
