package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// metricsServer serves the fleet's sluice metrics on a loopback /metrics,
// through the OpenTelemetry Prometheus exporter: one SDK MeterProvider per
// instance, whose resource names the instance (the label
// service_instance_id), as one process per instance would in production.
type metricsServer struct {
	srv  *http.Server
	ln   net.Listener
	mu   sync.Mutex
	regs prometheus.Gatherers
	mps  map[int]*sdkmetric.MeterProvider
	rds  map[int]*sdkmetric.ManualReader
}

// checkLoopback refuses an address that is not on loopback: the metrics
// are for a dashboard on this machine, not for the network.
func checkLoopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-metrics %q: want host:port on loopback, e.g. 127.0.0.1:9464", addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("-metrics %q: the port %q is not a number", addr, port)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("-metrics %q: serve on loopback only (127.0.0.1, ::1 or localhost)", addr)
	}
	return nil
}

// startMetrics listens on addr and serves /metrics.
func startMetrics(addr string) (*metricsServer, error) {
	if err := checkLoopback(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics: %w", err)
	}
	m := &metricsServer{ln: ln, mps: map[int]*sdkmetric.MeterProvider{}, rds: map[int]*sdkmetric.ManualReader{}}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.GathererFunc(m.gather), promhttp.HandlerOpts{}))
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = m.srv.Serve(ln) }()
	return m, nil
}

// Addr returns the address served.
func (m *metricsServer) Addr() string { return m.ln.Addr().String() }

// gather gathers every instance's registry.
func (m *metricsServer) gather() ([]*dto.MetricFamily, error) {
	m.mu.Lock()
	regs := m.regs
	m.mu.Unlock()
	return regs.Gather()
}

// provider returns instance idx's MeterProvider, creating it on first use
// (every scenario's instance idx reports through the same one), and a
// ManualReader of it, which the load test reads the checks by path from.
func (m *metricsServer) provider(idx int) (metric.MeterProvider, *sdkmetric.ManualReader, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mp, ok := m.mps[idx]; ok {
		return mp, m.rds[idx], nil
	}
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(),
		otelprom.WithResourceAsConstantLabels(attribute.NewAllowKeysFilter("service.instance.id")))
	if err != nil {
		return nil, nil, err
	}
	res := resource.NewSchemaless(attribute.String("service.name", "sluice-loadtest"), attribute.String("service.instance.id", "i"+strconv.Itoa(idx)))
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithReader(rd), sdkmetric.WithResource(res))
	m.mps[idx] = mp
	m.rds[idx] = rd
	m.regs = append(m.regs, reg)
	return mp, rd, nil
}

// Close stops serving and shuts the providers down.
func (m *metricsServer) Close() error {
	err := m.srv.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mp := range m.mps {
		err = errors.Join(err, mp.Shutdown(context.Background()))
	}
	return err
}
