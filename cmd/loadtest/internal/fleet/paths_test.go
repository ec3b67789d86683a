package fleet

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// checks returns a sluice.checks data point.
func checks(path, outcome string, n int64) metricdata.DataPoint[int64] {
	return metricdata.DataPoint[int64]{Value: n, Attributes: attribute.NewSet(
		attribute.String("rule", "r"), attribute.String("path", path), attribute.String("outcome", outcome))}
}

func TestPathsOf(t *testing.T) {
	t.Parallel()
	sum := func(name string, dps ...metricdata.DataPoint[int64]) metricdata.Metrics {
		return metricdata.Metrics{Name: name, Data: metricdata.Sum[int64]{DataPoints: dps}}
	}
	for _, c := range []struct {
		name string
		ms   []metricdata.Metrics
		want Paths
	}{
		{"nothing", nil, Paths{Read: true}},
		{"by path, outcomes summed", []metricdata.Metrics{
			sum("sluice.checks", checks("local", "allowed", 90), checks("local", "denied", 10), checks("urgent", "allowed", 3),
				checks("urgent", "denied", 4), checks("strict", "allowed", 5), checks("fallback", "denied", 6),
				checks("fallback", "error", 1), checks("soft", "allowed", 100)),
			sum("sluice.keys.untracked", metricdata.DataPoint[int64]{Value: 2}),
			sum("sluice.keys.evictions", metricdata.DataPoint[int64]{Value: 50}),
			{Name: "sluice.instances", Data: metricdata.Gauge[int64]{DataPoints: []metricdata.DataPoint[int64]{{Value: 4}}}},
		}, Paths{Local: 100, Urgent: 7, Strict: 5, Fallback: 7, Untracked: 2, Read: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rm := metricdata.ResourceMetrics{ScopeMetrics: []metricdata.ScopeMetrics{{Metrics: c.ms}}}
			p := pathsOf(&rm)
			assert.Equal(t, c.want, p)
			assert.Equal(t, c.want.Urgent+c.want.Strict+c.want.Fallback, p.Waited())
			assert.Equal(t, p.Local+p.Waited(), p.Checks())
		})
	}
	assert.Equal(t, Paths{}, ReadPaths(nil), "no reader: not read")
	a := Paths{Local: 5, Urgent: 2, Read: true}
	assert.Equal(t, Paths{Local: 10, Urgent: 4, Read: true}, a.Add(a))
	assert.Equal(t, Paths{Read: true}, a.sub(a))
	assert.False(t, a.Add(Paths{}).Read, "a sum with an unread instance is unread")
}
