package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/store"
)

// slowStore is a real TCP proxy (toxiproxy, run in this process) on a free
// loopback port in front of a one-address store, which delays every reply by
// a fixed latency: a store as slow as one across a network, for -latency.
type slowStore struct {
	p *toxiproxy.Proxy
}

// startSlowStore puts a proxy adding latency to every reply in front of
// target, and returns the target that goes through it. A cluster is
// refused: its nodes announce their own addresses, which bypass a proxy.
func startSlowStore(target store.Target, latency time.Duration) (*slowStore, store.Target, error) {
	if target.Cluster || len(target.Addrs) != 1 {
		return nil, target, fmt.Errorf("-latency needs a single Redis (not a cluster): %s", target)
	}
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(api, "store", "127.0.0.1:0", target.Addrs[0])
	if err := p.Start(); err != nil {
		return nil, target, fmt.Errorf("-latency: starting the proxy: %w", err)
	}
	toxic, err := json.Marshal(map[string]any{
		"name": "latency", "type": "latency", "stream": "downstream", "toxicity": 1.0,
		"attributes": map[string]any{"latency": latency.Milliseconds(), "jitter": 0},
	})
	if err == nil {
		_, err = p.Toxics.AddToxicJson(bytes.NewReader(toxic))
	}
	if err != nil {
		p.Stop()
		return nil, target, fmt.Errorf("-latency: adding the latency: %w", err)
	}
	slow := target
	slow.Addrs = []string{p.Listen}
	return &slowStore{p: p}, slow, nil
}

// Close stops the proxy and closes every connection through it.
func (s *slowStore) Close() { s.p.Stop() }
