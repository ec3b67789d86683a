package syncer

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/syncport"
)

// TestRefusalHysteresis: a store that refuses writes (out of memory) is
// judged down at the first refusal, stays down while it refuses (its reads,
// the cycles' registry looks, still succeed: no change of the fleet view
// meanwhile), and is healthy again only after okCycles cycles in a row whose
// writes it accepted, once.
func TestRefusalHysteresis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	cfg := testConfig(srv.Client(t), "a")
	cfg.Interval = 10 * time.Millisecond
	s, err := newSyncer(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Check(ctxT(t, opTimeout)))
	s = startSyncerChecked(t, s)
	require.True(t, s.isHealthy())

	ctx := context.Background()
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "1").Err())
	require.Eventually(t, func() bool { return !s.isHealthy() }, 5*time.Second, time.Millisecond)
	f := s.fleetView()
	require.ErrorIs(t, f.Err, syncport.ErrWritesRefused)
	require.ErrorContains(t, f.Err, "OOM")
	changes := f.Changes

	// Cycles go on, each a read that succeeds and a write refused.
	cycles := s.Stats().Cycles
	require.Eventually(t, func() bool { return s.Stats().Cycles >= cycles+20 }, 10*time.Second, time.Millisecond)
	require.False(t, s.isHealthy())
	require.Equal(t, changes, s.fleetView().Changes, "no change of health while the store refuses")

	freed := s.Stats().Cycles // the cycle under way may be the first good one
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "0").Err())
	require.Eventually(t, s.isHealthy, 10*time.Second, time.Millisecond)
	assert.GreaterOrEqual(t, s.Stats().Cycles-freed, s.okCycles()-1, "healthy only after okCycles cycles of accepted writes")
	assert.Equal(t, changes+1, s.fleetView().Changes, "healthy again, once")
	assert.NoError(t, s.fleetView().Err)
	assert.Equal(t, int64(100), s.okCycles(), "1 s of 10 ms cycles")
}

// startSyncerChecked starts s, on which Check ran, and closes it in
// t.Cleanup.
func startSyncerChecked(t *testing.T, s *Syncer) *Syncer {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	require.NoError(t, s.Start(ctxT(t, opTimeout)))
	return s
}

// TestACLCommandsCoverScripts: every command the package's scripts call is
// in ACLCommands, so an ACL user granted them runs every script (a command
// added to a script and not to the list would fail at New only for users
// whose scripts reach it; this names it at once).
func TestACLCommandsCoverScripts(t *testing.T) {
	t.Parallel()
	call := regexp.MustCompile(`redis\.call\(\s*['"]([A-Za-z]+)['"]`)
	granted := strings.Fields(ACLCommands)
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	seen := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			seen++
			require.Contains(t, granted, "+"+strings.ToLower(m[1]), "%s calls %s", f, m[1])
		}
	}
	require.Greater(t, seen, 20, "the scripts' calls were found")
}
