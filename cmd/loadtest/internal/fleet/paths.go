package fleet

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Paths counts an instance's checks by how they were decided, as its
// limiter's metrics report them (sluice.checks by path, and
// sluice.keys.untracked): the load test reads them through an
// OpenTelemetry ManualReader on the limiter's MeterProvider. The limiter
// decides a check locally, or hands it to Redis and waits for the answer:
// Urgent (an Eventual key at its divergence cap, or a key the local cache
// keeps out: Untracked counts those, which the urgent path also counts),
// Strict (a Strict rule), or Fallback (Redis failed the check or did not
// answer within the timeout; the failure mode decided, after the wait).
type Paths struct {
	Local     int64 `json:"local"`
	Urgent    int64 `json:"urgent"`
	Strict    int64 `json:"strict"`
	Fallback  int64 `json:"fallback"`
	Untracked int64 `json:"untracked"`
	// Read is false if the metrics could not be read.
	Read bool `json:"read"`
}

// Waited returns the checks that waited for Redis: urgent, strict and
// fallback.
func (p Paths) Waited() int64 { return p.Urgent + p.Strict + p.Fallback }

// Checks returns every check counted.
func (p Paths) Checks() int64 { return p.Local + p.Waited() }

func (p Paths) sub(o Paths) Paths {
	return Paths{p.Local - o.Local, p.Urgent - o.Urgent, p.Strict - o.Strict, p.Fallback - o.Fallback, p.Untracked - o.Untracked, p.Read && o.Read}
}

// Add returns p + o (read if both were).
func (p Paths) Add(o Paths) Paths {
	return Paths{p.Local + o.Local, p.Urgent + o.Urgent, p.Strict + o.Strict, p.Fallback + o.Fallback, p.Untracked + o.Untracked, p.Read && o.Read}
}

// ReadPaths collects r and sums the checks by path across rules and
// outcomes.
func ReadPaths(r *sdkmetric.ManualReader) Paths {
	var rm metricdata.ResourceMetrics
	if r == nil || r.Collect(context.Background(), &rm) != nil {
		return Paths{}
	}
	return pathsOf(&rm)
}

// pathsOf sums the checks of rm by path.
func pathsOf(rm *metricdata.ResourceMetrics) Paths {
	p := Paths{Read: true}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				switch m.Name {
				case "sluice.keys.untracked":
					p.Untracked += dp.Value
				case "sluice.checks":
					v, _ := dp.Attributes.Value(attribute.Key("path"))
					switch v.AsString() {
					case "local":
						p.Local += dp.Value
					case "urgent":
						p.Urgent += dp.Value
					case "strict":
						p.Strict += dp.Value
					case "fallback":
						p.Fallback += dp.Value
					}
				}
			}
		}
	}
	return p
}
