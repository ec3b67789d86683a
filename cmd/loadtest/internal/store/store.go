// Package store resolves the load test's -redis flag into Redis clients: one
// real Redis, a Redis Cluster (a comma-separated list of nodes, a cluster URL
// with addr= parameters, or one node of a cluster, detected), a throwaway
// redis-server it starts, or the embedded miniredis stand-in.
package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Target is where the fleet's store is. It is plain data, so that the parent
// can hand it to child processes.
type Target struct {
	Addrs    []string `json:"addrs"`
	Cluster  bool     `json:"cluster"`
	DB       int      `json:"db,omitempty"`
	Username string   `json:"username,omitempty"`
	Password string   `json:"-"` // never printed; children get it through Secret
	Secret   string   `json:"secret,omitempty"`
	TLS      bool     `json:"tls,omitempty"`
	// Embedded is set for the in-process miniredis stand-in.
	Embedded bool `json:"embedded,omitempty"`
}

// Parse resolves the -redis flag: "host:port", "redis://[user:pass@]host:port[/db]",
// "rediss://...", a cluster URL "redis://host:port?addr=host2:port2&addr=..."
// (redis.ParseClusterURL), or a comma-separated list of any of these (a Redis
// Cluster seeded with every address).
func Parse(s string) (Target, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Target{}, errors.New("empty -redis address")
	}
	parts := strings.Split(s, ",")
	if len(parts) > 1 {
		var t Target
		for i, p := range parts {
			one, err := Parse(p)
			if err != nil {
				return Target{}, fmt.Errorf("-redis item %d: %w", i+1, err)
			}
			if i == 0 {
				t = one
			}
			if i > 0 {
				t.Addrs = append(t.Addrs, one.Addrs...)
			}
		}
		t.Cluster = true
		t.DB = 0
		return t, nil
	}
	if !strings.Contains(s, "://") {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return Target{}, fmt.Errorf("-redis %q: want host:port or a redis:// URL: %v", s, err)
		}
		return Target{Addrs: []string{s}}, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return Target{}, fmt.Errorf("-redis %q: %v", s, err)
	}
	if u.Query().Has("addr") {
		o, err := redis.ParseClusterURL(s)
		if err != nil {
			return Target{}, fmt.Errorf("-redis %q: %v", s, err)
		}
		return Target{Addrs: o.Addrs, Cluster: true, Username: o.Username, Password: o.Password, TLS: o.TLSConfig != nil}, nil
	}
	o, err := redis.ParseURL(s)
	if err != nil {
		return Target{}, fmt.Errorf("-redis %q: %v", s, err)
	}
	return Target{Addrs: []string{o.Addr}, DB: o.DB, Username: o.Username, Password: o.Password, TLS: o.TLSConfig != nil}, nil
}

// String describes the target without credentials.
func (t Target) String() string {
	kind := "Redis"
	switch {
	case t.Embedded:
		kind = "embedded miniredis stand-in (not a real Redis)"
	case t.Cluster:
		kind = "Redis Cluster"
	}
	return fmt.Sprintf("%s at %s", kind, strings.Join(t.Addrs, ","))
}

// Seal moves the password into the field children receive.
func (t Target) Seal() Target { t.Secret = t.Password; return t }

// Unseal restores the password a child received.
func (t Target) Unseal() Target {
	if t.Password == "" {
		t.Password = t.Secret
	}
	t.Secret = ""
	return t
}

// Client returns a new client with its own connection pool.
func (t Target) Client() redis.UniversalClient {
	o := &redis.UniversalOptions{
		Addrs:                    t.Addrs,
		IsClusterMode:            t.Cluster,
		DB:                       t.DB,
		Username:                 t.Username,
		Password:                 t.Password,
		DialTimeout:              2 * time.Second,
		ReadTimeout:              2 * time.Second,
		WriteTimeout:             2 * time.Second,
		ContextTimeoutEnabled:    true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if t.TLS {
		host, _, _ := net.SplitHostPort(t.Addrs[0])
		o.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	}
	return redis.NewUniversalClient(o)
}

// Detect pings the target and, for a single address, finds out whether it is
// a cluster node (INFO cluster), switching to a cluster client if so.
func (t Target) Detect(ctx context.Context) (Target, error) {
	c := t.Client()
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		return t, fmt.Errorf("cannot reach %s: %w", t, err)
	}
	if t.Cluster || t.Embedded {
		return t, nil
	}
	info, err := c.Info(ctx, "cluster").Result()
	if err == nil && strings.Contains(info, "cluster_enabled:1") {
		t.Cluster = true
	}
	return t, nil
}

// Embedded is a miniredis stand-in listening on loopback.
type Embedded struct {
	m *miniredis.Miniredis
}

// StartEmbedded starts miniredis on a free 127.0.0.1 port.
func StartEmbedded() (*Embedded, Target, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, Target{}, fmt.Errorf("starting the embedded miniredis: %w", err)
	}
	return &Embedded{m: m}, Target{Addrs: []string{m.Addr()}, Embedded: true}, nil
}

// Close stops the server.
func (e *Embedded) Close() { e.m.Close() }

// Stop closes the listener and every connection (an outage); Restart brings
// the server back on the same address with its data.
func (e *Embedded) Stop() { e.m.Close() }

// Restart restarts a stopped server on its address.
func (e *Embedded) Restart() error { return e.m.Restart() }

// Foreign returns a key of the store that does not begin with prefix (or
// another database that holds keys), or "" if every key does: the keys of
// every master of a cluster are scanned, at most max in all (past that, it
// returns an error).
func (t Target) Foreign(ctx context.Context, prefix string, max int) (string, error) {
	c := t.Client()
	defer c.Close()
	if !t.Cluster {
		info, err := c.Info(ctx, "keyspace").Result()
		if err != nil {
			return "", err
		}
		own := "db" + strconv.Itoa(t.DB) + ":"
		for _, l := range strings.Split(info, "\n") {
			if strings.HasPrefix(l, "db") && !strings.HasPrefix(l, own) {
				db, _, _ := strings.Cut(l, ":")
				return "database " + db + " (not empty)", nil
			}
		}
	}
	seen := 0
	var found string
	scan := func(ctx context.Context, n redis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := n.Scan(ctx, cursor, "", 1000).Result()
			if err != nil {
				return err
			}
			for _, k := range keys {
				if !strings.HasPrefix(k, prefix) {
					found = k
					return nil
				}
			}
			if seen += len(keys); seen > max {
				return fmt.Errorf("more than %d keys to look through", max)
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock() // one master at a time: found and seen are shared
			defer mu.Unlock()
			if found != "" {
				return nil
			}
			return scan(ctx, n)
		})
		return found, err
	}
	err := scan(ctx, c)
	return found, err
}
