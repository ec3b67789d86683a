package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/policy"
)

// TestUtilizationNote: a lowest utilization below the promise is called the
// algorithm's own only when the algorithm run centrally reads about the
// same; further below it, the note gives the points that are the fleet's.
func TestUtilizationNote(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		fleet, algo float64
		alg         policy.Algorithm
		want        string
	}{
		{"the algorithm's own", 0.764, 0.760, policy.SlidingWindow,
			"the lowest utilization, 76.4%, is the algorithm's own: the sliding run centrally on the same checks gets 76.0% (a sliding window frees a sub-window only once all of it has left the window; an exact log frees each request as it leaves)"},
		{"within a point below", 0.875, 0.882, policy.FixedWindow,
			"the lowest utilization, 87.5%, is the algorithm's own: the fixed run centrally on the same checks gets 88.2%"},
		{"further below: the fleet's", 0.825, 0.882, policy.SlidingWindow,
			"the lowest utilization, 82.5%, is below the algorithm's own: the sliding run centrally on the same checks gets 88.2%, so 5.7 points are the fleet's (a sliding window frees a sub-window only once all of it has left the window; an exact log frees each request as it leaves)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, utilizationNote(tc.fleet, tc.algo, tc.alg))
		})
	}
}
