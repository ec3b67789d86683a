package traffic

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// opsParams are an operations profile's parameters at the load test's
// defaults but for the run's length.
func opsParams(profile string) Params {
	return Params{Profile: profile, Rate: 8000, Duration: 4 * time.Second, Window: time.Second, Sub: 100 * time.Millisecond,
		Limit: 500, Keys: OpKeys(profile), MaxCost: 1, Instances: 4, Workers: 2, Seed: 7}
}

// maxIn returns the most of ts (sorted) in any interval of length w.
func maxIn(ts []int64, w int64) int {
	best, lo := 0, 0
	for hi := range ts {
		for ts[hi]-ts[lo] >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// TestOperationsSchedule: every operations profile offers each check once,
// to one instance and worker, deterministically; a quiet key never more
// than 0.8·L in any window nor 0.9·L in any window plus a sub-window, a
// hot key more than 2·L; and it is not in the default run.
func TestOperationsSchedule(t *testing.T) {
	t.Parallel()
	for _, prof := range Operations {
		t.Run(prof, func(t *testing.T) {
			t.Parallel()
			p := opsParams(prof)
			require.NoError(t, p.Validate())
			assert.True(t, Valid(prof) && p.Paced() && !slices.Contains(Profiles, prof))
			cs, _ := p.Merged(0)
			again, _ := p.Merged(0)
			require.Equal(t, cs, again, "deterministic")
			perKey := make([][]int64, p.Keys)
			for _, c := range cs {
				require.Less(t, int(c.Key), p.Keys)
				require.EqualValues(t, 1, c.Cost)
				perKey[c.Key] = append(perKey[c.Key], c.At)
			}
			w, span := int64(p.Window), int64(p.Window+p.Sub)
			for k, ts := range perKey {
				slices.Sort(ts)
				if p.Quiet(k) {
					assert.LessOrEqual(t, maxIn(ts, w), int(0.8*float64(p.Limit))+1, "key %d (%s)", k, p.Pattern(k))
					assert.LessOrEqual(t, maxIn(ts, span), int(0.9*float64(p.Limit)), "key %d (%s)", k, p.Pattern(k))
				} else {
					assert.Greater(t, maxIn(ts, w), 2*int(p.Limit), "key %d (%s)", k, p.Pattern(k))
				}
			}
			// Each check is made by exactly one stream.
			assert.Len(t, allMade(&p), len(cs))
			assert.InDelta(t, p.OpRate()*p.Duration.Seconds(), float64(len(cs)), 0.05*float64(len(cs)))
		})
	}
}

// made is a check with the instance that made it.
type made struct {
	Check
	inst int
}

// allMade returns every check of p with the instance that made it.
func allMade(p *Params) []made {
	var out []made
	for i := range p.Instances {
		for w := range p.Workers {
			s := p.NewStream(i, w, NewKeyDist(p))
			for {
				c, ok := s.Next(0)
				if !ok {
					break
				}
				out = append(out, made{c, i})
			}
		}
	}
	return out
}

// instancesOf returns, per key, how many of its checks each instance made
// in [from, to).
func instancesOf(p *Params, ms []made, from, to int64) []map[int]int {
	out := make([]map[int]int, p.Keys)
	for k := range out {
		out[k] = map[int]int{}
	}
	for _, m := range ms {
		if m.At >= from && m.At < to {
			out[m.Key][m.inst]++
		}
	}
	return out
}

// TestShiftPatterns: a key sticks to one instance at a time until it
// moves (all at once, draining's ends, the sticky control), or goes round
// robin over all of them; the draining key is on two instances while it
// drains.
func TestShiftPatterns(t *testing.T) {
	t.Parallel()
	p := opsParams(Shift)
	d := int64(p.Duration)
	ms := allMade(&p)
	first := instancesOf(&p, ms, 0, d/3)
	mid := instancesOf(&p, ms, d/3+d/12, 2*d/3-d/12)
	last := instancesOf(&p, ms, 2*d/3, d)
	whole := instancesOf(&p, ms, 0, d)
	for k := range p.Keys {
		switch k % 4 {
		case 0:
			if p.Quiet(k) {
				// Hops at each burst: several instances over the run.
				assert.Greater(t, len(whole[k]), 1, "key %d: %v", k, whole[k])
			} else {
				assert.Len(t, first[k], 1, "key %d", k)
				assert.Len(t, last[k], 1, "key %d", k)
				assert.NotEqual(t, first[k], last[k], "key %d moved", k)
			}
		case 1:
			assert.Len(t, whole[k], p.Instances, "key %d: round robin", k)
		case 2:
			// A quiet key may be between its bursts in a span.
			assert.LessOrEqual(t, len(first[k]), 1, "key %d", k)
			assert.LessOrEqual(t, len(last[k]), 1, "key %d", k)
			assert.Len(t, whole[k], 2, "key %d: draining", k)
			if !p.Quiet(k) {
				assert.Len(t, mid[k], 2, "key %d: draining", k)
				assert.NotEqual(t, first[k], last[k], "key %d drained into another", k)
			}
		case 3:
			assert.Len(t, whole[k], 1, "key %d: the sticky control", k)
		}
	}
}

// TestDeploy: each instance is drained and then down once, in turn, never
// two at a time, and no check goes to an instance from its drain until its
// replacement starts; a sticky key's checks go to the next instance
// meanwhile.
func TestDeploy(t *testing.T) {
	t.Parallel()
	p := opsParams(Deploy)
	ms := allMade(&p)
	var prevUp int64
	for i := range p.Instances {
		down, up, ok := p.Downtime(i)
		require.True(t, ok)
		assert.Less(t, down, up)
		assert.GreaterOrEqual(t, drainOf(&p, i), prevUp, "instance %d drained while %d is down", i, i-1)
		prevUp = up
		assert.Equal(t, []Span{{0, down}, {up, int64(p.Duration)}}, p.Serving(i))
		assert.Equal(t, p.DrainLead(), down-(drainOf(&p, i)), "instance %d drained before it closes", i)
		during := instancesOf(&p, ms, down-p.DrainLead(), up)
		for k := range p.Keys {
			assert.Zero(t, during[k][i], "key %d on instance %d while it is down", k, i)
			if k%2 == 0 && k%p.Instances == i {
				assert.Positive(t, during[k][(i+1)%p.Instances], "sticky key %d on the next instance", k)
			}
		}
	}
	shift := opsParams(Shift)
	_, _, ok := shift.Downtime(0)
	assert.False(t, ok)
}

// drainOf returns when instance i of a deploy is drained.
func drainOf(p *Params, i int) int64 {
	from, _, _ := p.drained(i)
	return from
}

// TestReloadTimes: the rewrites fall within the middle three fifths of the
// run, in order, at least 100 ms apart; other profiles have none.
func TestReloadTimes(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond, 5 * time.Second} {
		p := opsParams(Reload)
		p.Duration = d
		ts := p.ReloadTimes()
		require.NotEmpty(t, ts, d)
		assert.GreaterOrEqual(t, ts[0], int64(d)/5, d)
		assert.Less(t, ts[len(ts)-1], int64(d)*4/5, d)
		for i := 1; i < len(ts); i++ {
			assert.GreaterOrEqual(t, ts[i]-ts[i-1], int64(100*time.Millisecond), d)
		}
	}
	shift := opsParams(Shift)
	assert.Empty(t, shift.ReloadTimes())
}

// TestStoreLossTimes: at least one flush, from 30 % of the run, each a
// window and a sub-window after the one before, none after 80 %.
func TestStoreLossTimes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d    time.Duration
		want int
	}{{1500 * time.Millisecond, 1}, {5 * time.Second, 3}, {10 * time.Second, 3}} {
		p := opsParams(StoreLoss)
		p.Duration = c.d
		ts := p.StoreLossTimes()
		assert.Len(t, ts, c.want, c.d)
		assert.Equal(t, int64(c.d)*3/10, ts[0], c.d)
		for i := 1; i < len(ts); i++ {
			assert.GreaterOrEqual(t, ts[i]-ts[i-1], int64(p.Window+p.Sub), c.d)
		}
		assert.Less(t, ts[len(ts)-1], int64(c.d)*4/5, c.d)
	}
}

// TestOperationsValidate: the profiles that move traffic need two
// instances.
func TestOperationsValidate(t *testing.T) {
	t.Parallel()
	for _, prof := range Operations {
		p := opsParams(prof)
		p.Instances = 1
		err := p.Validate()
		if MinInstances(prof) > 1 {
			assert.ErrorContains(t, err, "at least 2", prof)
		} else {
			assert.NoError(t, err, prof)
		}
	}
}
