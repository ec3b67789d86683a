package main

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// newMetrics is a MeterProvider for the limiter (docs/observability.md
// lists its metrics) read by a Prometheus exporter, and the handler of
// GET /metrics that serves them in Prometheus' text format. Shut the
// provider down when done.
func newMetrics() (*sdkmetric.MeterProvider, http.Handler, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "sluice"))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
	return mp, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}
