package redistest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTLS: a server started WithTLS listens for TLS only, with a
// certificate for 127.0.0.1 from the test's CA; a client trusting that CA
// works, one trusting another CA fails the handshake, and plain TCP gets no
// answer.
func TestTLS(t *testing.T) {
	t.Parallel()
	ca := NewCA(t, "redistest CA")
	s := Start(t, WithTLS(ca))
	require.NotNil(t, s.TLSConfig())
	ctx := ctxTimeout(t, 30*time.Second)

	c := s.Client(t)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
	cfg, err := c.ConfigGet(ctx, "*port").Result()
	require.NoError(t, err)
	assert.Equal(t, "0", cfg["port"], "no plain TCP port")
	assert.Equal(t, strconv.Itoa(s.Port()), cfg["tls-port"])

	wrong := NewCA(t, "another CA")
	bad := redis.NewClient(&redis.Options{
		Addr:                     s.Addr(),
		TLSConfig:                wrong.ClientTLS(),
		DialTimeout:              time.Second,
		MaxRetries:               -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = bad.Close() })
	err = bad.Ping(ctx).Err()
	var unknown x509.UnknownAuthorityError
	require.True(t, errors.As(err, &unknown), "a server certificate from another CA: %v", err)

	_, err = do(ctx, s.Addr(), time.Second, []string{"PING"})
	assert.Error(t, err, "plain RESP on the TLS port")

	// The certificate names 127.0.0.1 and nothing else.
	_, err = doTLS(ctx, s.Addr(), &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}, time.Second, []string{"PING"})
	var host x509.HostnameError
	assert.True(t, errors.As(err, &host), "another name: %v", err)
}
