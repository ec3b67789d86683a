package policy

// Names the external tests (package policy_test) use, unexported in the
// package.
const (
	MaxNameLength = maxNameLength
	MinInterval   = minInterval
	NoPeriod      = noPeriod
)

// ParsePeriod is parsePeriod, for the fuzz test.
var ParsePeriod = parsePeriod
