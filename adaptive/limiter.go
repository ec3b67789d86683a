package adaptive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Errors of New and Acquire. A refusal (load shed) is not an error: it is a
// Slot whose OK is false.
var (
	// ErrInvalidOptions is wrapped by New's errors about Options.
	ErrInvalidOptions = errors.New("adaptive: invalid options")
	// ErrClosed means the Limiter was closed.
	ErrClosed = errors.New("adaptive: limiter closed")
	// ErrInvalidPriority means Acquire was given a Priority that is none
	// of Critical, Default and Sheddable.
	ErrInvalidPriority = errors.New("adaptive: invalid priority")
)

// Clock is a source of time for a Limiter, for tests and simulation.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// MaxLimit is the highest ceiling a Limiter accepts (2²¹ − 1).
const MaxLimit = 1<<21 - 1

// Options configure a Limiter.
type Options struct {
	// Algorithm moves the limit from the requests' latencies. nil: a new
	// Gradient2 with its defaults.
	Algorithm Algorithm
	// Min is the floor of the limit; 1 if zero.
	Min int
	// Max is the ceiling of the limit, at most MaxLimit; 1000 if zero.
	Max int
	// Initial is the limit at start, within [Min, Max]; 20 (or the nearest
	// bound) if zero.
	Initial int
	// Shares are the fractions of the limit the lower priorities may fill.
	Shares Shares
	// Clock replaces the system clock (tests, simulation).
	Clock Clock
	// MeterProvider receives the Limiter's metrics (observed when
	// collected; see docs/concurrency.md); nil: the global one.
	MeterProvider metric.MeterProvider
	// Name is the value of the limiter attribute of the metrics, to tell
	// several Limiters apart; "default" if empty.
	Name string
}

func (o *Options) fill() error {
	if o.Algorithm == nil {
		o.Algorithm = &Gradient2{}
	}
	if v, ok := o.Algorithm.(validator); ok {
		if err := v.Validate(); err != nil {
			return err
		}
	}
	if o.Min == 0 {
		o.Min = 1
	}
	if o.Max == 0 {
		o.Max = max(1000, o.Min)
	}
	if o.Min < 1 || o.Max < o.Min || o.Max > MaxLimit {
		return fmt.Errorf("%w: Min %d, Max %d: want 1 ≤ Min ≤ Max ≤ %d", ErrInvalidOptions, o.Min, o.Max, MaxLimit)
	}
	if o.Initial == 0 {
		o.Initial = max(o.Min, min(o.Max, 20))
	}
	if o.Initial < o.Min || o.Initial > o.Max {
		return fmt.Errorf("%w: Initial %d outside [Min %d, Max %d]", ErrInvalidOptions, o.Initial, o.Min, o.Max)
	}
	if o.Name == "" {
		o.Name = "default"
	}
	return o.Shares.fill()
}

// The caps of the priorities are packed in one word, capBits each, so that
// Acquire reads them with one atomic load.
const (
	capBits = 21
	capMask = MaxLimit
)

// Limiter limits the requests in flight to a limit that its Algorithm moves
// with their latencies, and sheds the lower priorities first. It is safe
// for concurrent use.
type Limiter struct {
	// inflight is written by every request, shed by every refusal, caps
	// and closed read by every Acquire: each on its own cache line.
	inflight atomic.Int64
	_        [56]byte
	caps     atomic.Uint64
	closed   atomic.Bool
	_        [55]byte
	shed     [NumPriorities]atomic.Int64
	_        [40]byte
	reg      metric.Registration // nil if the metrics could not be registered

	clock  Clock
	shares [NumPriorities]float64
	pool   sync.Pool // *slot

	mu        sync.Mutex // the algorithm and what follows
	alg       Algorithm
	estimate  float64
	min, max  float64
	limit     int64 // ⌊estimate⌋, as packed in caps
	completed int64
	dropped   int64
	ignored   int64
}

// New returns a Limiter with opts, or an error wrapping ErrInvalidOptions
// that says what to change.
func New(opts Options) (*Limiter, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	l := &Limiter{
		clock:    opts.Clock,
		alg:      opts.Algorithm,
		estimate: float64(opts.Initial),
		min:      float64(opts.Min),
		max:      float64(opts.Max),
	}
	l.shares[Critical] = 1
	l.shares[Default] = opts.Shares.Default
	l.shares[Sheddable] = opts.Shares.Sheddable
	l.pool.New = func() any { return &slot{l: l} }
	l.publish()
	l.register(opts.MeterProvider, opts.Name)
	return l, nil
}

// publish stores ⌊estimate⌋ and the caps it gives (under mu, or in New).
func (l *Limiter) publish() {
	lim := int64(l.estimate)
	l.limit = lim
	var caps uint64
	for p, share := range l.shares {
		// The epsilon keeps a product like 100·0.95 that floating point
		// puts a hair below its integer from losing a slot.
		c := uint64(math.Floor(float64(lim)*share + 1e-9))
		caps |= c << (capBits * p)
	}
	l.caps.Store(caps)
}

func (l *Limiter) now() time.Time {
	if l.clock != nil {
		return l.clock.Now()
	}
	return time.Now()
}

// Acquire admits a request of priority p if the requests in flight are
// below p's cap, ⌊L·share(p)⌋ (see the package doc), and returns its Slot:
// release it when the request ends. Over the cap it refuses at once: the
// Slot's OK is false and the error nil (a refusal is a result; nothing to
// release). The error is ctx's if ctx is done, ErrClosed after Close, or
// ErrInvalidPriority.
func (l *Limiter) Acquire(ctx context.Context, p Priority) (Slot, error) {
	if err := ctx.Err(); err != nil {
		return Slot{}, err
	}
	if l.closed.Load() {
		return Slot{}, ErrClosed
	}
	if p >= NumPriorities {
		return Slot{}, fmt.Errorf("%w: %d", ErrInvalidPriority, uint8(p))
	}
	shift := capBits * uint(p)
	var n int64
	for {
		c := int64(l.caps.Load() >> shift & capMask)
		n = l.inflight.Load()
		if n >= c {
			l.shed[p].Add(1)
			return Slot{}, nil
		}
		if l.inflight.CompareAndSwap(n, n+1) {
			break
		}
	}
	s := l.pool.Get().(*slot)
	s.start = l.now()
	s.inflight = n + 1
	return Slot{s: s, gen: s.gen.Load()}, nil
}

// observe feeds the algorithm the sample of a request that ended.
func (l *Limiter) observe(start time.Time, inflight int64, o Outcome) {
	if o == Ignored {
		l.mu.Lock()
		l.ignored++
		l.mu.Unlock()
		return
	}
	rtt := l.now().Sub(start)
	l.mu.Lock()
	defer l.mu.Unlock()
	if o == Dropped {
		l.dropped++
	} else {
		l.completed++
	}
	est := l.alg.Update(l.estimate, Sample{Start: start, RTT: rtt, InFlight: inflight, Dropped: o == Dropped})
	if math.IsNaN(est) {
		est = l.estimate // a broken algorithm does not break the limiter
	}
	l.estimate = max(l.min, min(l.max, est))
	if int64(l.estimate) != l.limit {
		l.publish()
	}
}

// Close makes further Acquires fail with ErrClosed and unregisters the
// metrics. Slots held stay valid: releasing them after Close is safe. It
// returns the metrics' unregistration error, if any; closing again does
// nothing.
func (l *Limiter) Close() error {
	if l.closed.Swap(true) || l.reg == nil {
		return nil
	}
	return l.reg.Unregister()
}

// Stats is a snapshot of a Limiter.
type Stats struct {
	// Limit is the current limit L, the cap of Critical requests.
	Limit int64
	// Estimate is the algorithm's estimate of the limit, within
	// [Min, Max] (Limit is its integer part).
	Estimate float64
	// InFlight is the number of slots held.
	InFlight int64
	// Caps are the caps of the priorities, by Priority: ⌊Limit·share⌋.
	Caps [NumPriorities]int64
	// Shed counts the refusals, by Priority.
	Shed [NumPriorities]int64
	// Completed, Dropped and Ignored count the slots released with each
	// Outcome.
	Completed, Dropped, Ignored int64
}

// Stats returns the Limiter's current state.
func (l *Limiter) Stats() Stats {
	var s Stats
	s.InFlight = l.inflight.Load()
	caps := l.caps.Load()
	for p := range s.Caps {
		s.Caps[p] = int64(caps >> (capBits * p) & capMask)
		s.Shed[p] = l.shed[p].Load()
	}
	l.mu.Lock()
	s.Limit, s.Estimate = l.limit, l.estimate
	s.Completed, s.Dropped, s.Ignored = l.completed, l.dropped, l.ignored
	l.mu.Unlock()
	return s
}
