package systemtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rulegeo"
	"github.com/sluicehq/sluice/policy"
)

// tlsClient returns a go-redis client for a TLS-only Redis at addr that
// trusts the CA certificates in the PEM file caFile, as an application
// would set it up (opts adjust its options); closed in t.Cleanup.
func tlsClient(t *testing.T, addr, caFile string, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem), "no certificate in %s", caFile)
	opt := &redis.Options{
		Addr:                     addr,
		TLSConfig:                &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		DialTimeout:              time.Second,
		ReadTimeout:              time.Second,
		WriteTimeout:             time.Second,
		ContextTimeoutEnabled:    true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	for _, o := range opts {
		o(opt)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestTLSStore runs two instances on a Redis that accepts TLS connections
// only (--port 0, --tls-port), with a server certificate for 127.0.0.1 from a
// CA the test makes at run time: an Eventual rule syncs (Redis counts every
// admission, each instance's view holds the other's) and a Strict rule
// admits exactly its limit across the fleet.
func TestTLSStore(t *testing.T) {
	t.Parallel()
	ca := redistest.NewCA(t, "sluice test CA")
	srv := redistest.Start(t, redistest.WithTLS(ca))
	eventual := policy.Rule{Name: "api", Limit: 100, Window: time.Minute}
	strict := policy.Rule{Name: "login", Limit: 5, Window: time.Minute, Mode: policy.Strict}
	ls := fleet(t, 2, func() redis.UniversalClient { return tlsClient(t, srv.Addr(), ca.CertFile()) },
		sluice.Options{Prefix: "tls", Timeout: 5 * time.Second}, eventual, strict)
	ctx := context.Background()

	for i, l := range ls {
		for range 10 * (i + 1) {
			d, err := l.Allow(ctx, eventual.Name, "k")
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
	}
	flushAll(t, ls) // pushes
	flushAll(t, ls) // pulls what the other pushed
	direct := srv.Client(t)
	assert.Equal(t, int64(30), sum(buckets(t, direct, "tls", eventual.Name, "k", rulegeo.SubWindow(eventual))), "Redis counts both instances' admissions")
	for i, l := range ls {
		d, err := l.Peek(eventual.Name, "k")
		require.NoError(t, err)
		assert.Equal(t, eventual.Limit-30, d.Remaining, "instance %d's view holds the whole fleet's count", i)
	}

	var admitted int64
	for range 5 {
		for _, l := range ls {
			d, err := l.Allow(ctx, strict.Name, "user")
			require.NoError(t, err)
			if d.Allowed {
				admitted++
			}
		}
	}
	assert.Equal(t, strict.Limit, admitted, "Strict: exactly Limit across the fleet")
	for i, l := range ls {
		st := l.Stats()
		assert.False(t, st.Degraded, "instance %d", i)
		assert.Zero(t, st.Sync.Failures, "instance %d: no failed round trip", i)
	}
}

// TestTLSWrongCA: an instance whose client trusts another CA than the one
// that signed the server's certificate never reaches the store, and says
// so. What holds today: New returns a working limiter on its failure mode
// (degraded, FailLocal), Flush returns the certificate error, the logger
// gets a "store unreachable" line with it, and a Strict rule is decided
// locally on the instance's share (FailLocal). Should New ever check the store first and refuse a
// client that fails its TLS handshake, New's error must carry the same
// certificate error: the test accepts that too.
func TestTLSWrongCA(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.WithTLS(redistest.NewCA(t, "the server's CA")))
	wrong := redistest.NewCA(t, "another CA")
	var logs logbuf.Buffer
	rule := policy.Rule{Name: "login", Limit: 5, Window: time.Minute, Mode: policy.Strict}
	l, err := sluice.New(sluice.Options{
		// One dial per attempt: go-redis's default of five, 100 ms apart,
		// takes 0.4 s and five handshakes, which on a loaded machine
		// outlast the heartbeat's 1 s: the error is then that deadline,
		// not the certificate this test is about.
		Redis:  tlsClient(t, srv.Addr(), wrong.CertFile(), func(o *redis.Options) { o.DialerRetries = 1 }),
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}, rule)
	var unknown x509.UnknownAuthorityError
	if err != nil {
		// A fail-fast New.
		assert.True(t, errors.As(err, &unknown), "New's error names the certificate: %v", err)
		return
	}
	t.Cleanup(func() { _ = l.Close() })

	assert.True(t, l.Stats().Degraded, "the store is unreachable from the start")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = l.Flush(ctx)
	require.Error(t, err, "a sync fails")
	assert.True(t, errors.As(err, &unknown), "Flush's error names the certificate: %v", err)
	assert.Contains(t, logs.String(), "store unreachable")
	assert.Contains(t, logs.String(), "certificate signed by unknown authority", "the log line names the cause")
	var admitted int64
	for range 2 * rule.Limit {
		d, err := l.Allow(ctx, rule.Name, "user")
		require.NoError(t, err, "FailLocal: a decision, not an error")
		if d.Allowed {
			admitted++
		}
	}
	assert.Equal(t, rule.Limit/l.Stats().Instances, admitted, "FailLocal: the instance's share, decided locally")
}
