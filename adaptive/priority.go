package adaptive

import "fmt"

// Priority is how important a request is: as the limit fills, Sheddable
// requests are refused first, then Default ones, and Critical ones last.
// The zero value is Default.
type Priority uint8

// The priorities.
const (
	// Default is the priority of ordinary traffic: admitted while in flight
	// is below ⌊L·Shares.Default⌋.
	Default Priority = iota
	// Critical requests are admitted up to the whole limit L.
	Critical
	// Sheddable requests (prefetches, retries, batch work) are admitted
	// while in flight is below ⌊L·Shares.Sheddable⌋.
	Sheddable

	// NumPriorities is the number of priorities (the length of
	// Stats.Shed).
	NumPriorities = 3
)

// String returns the priority's name: "critical", "default" or "sheddable".
func (p Priority) String() string {
	switch p {
	case Critical:
		return "critical"
	case Default:
		return "default"
	case Sheddable:
		return "sheddable"
	}
	return fmt.Sprintf("Priority(%d)", uint8(p))
}

// Shares are the fractions of the current limit L that the lower priorities
// may fill: priority p is admitted while in flight < ⌊L·share⌋ (Critical's
// share is always 1). Zero fields take the defaults; they must satisfy
// 0 < Sheddable ≤ Default ≤ 1.
type Shares struct {
	// Default is Default's share; 0.95 if zero.
	Default float64
	// Sheddable is Sheddable's share; 0.8 if zero.
	Sheddable float64
}

// The default shares.
const (
	DefaultShare   = 0.95
	SheddableShare = 0.8
)

func (s *Shares) fill() error {
	if s.Default == 0 {
		s.Default = DefaultShare
	}
	if s.Sheddable == 0 {
		s.Sheddable = min(SheddableShare, s.Default)
	}
	if !(s.Sheddable > 0 && s.Sheddable <= s.Default && s.Default <= 1) {
		return fmt.Errorf("%w: Shares %+v: want 0 < Sheddable ≤ Default ≤ 1", ErrInvalidOptions, *s)
	}
	return nil
}
