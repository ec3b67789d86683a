package syncer

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/keyname"
	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/window"
)

// dummyClient satisfies New; KeyName never uses it.
var dummyClient redis.UniversalClient = (*redis.Client)(nil)

// noKeys is a Keys that never has a key: naming keys needs a rule, not its
// local state (and a table cannot hold every geometry named here).
type noKeys struct{}

func (noKeys) Drain(dst []handle) []handle                                    { return dst }
func (noKeys) Key(handle) string                                              { return "" }
func (noKeys) Pending(_ handle, _ int64, dst []window.Bucket) []window.Bucket { return dst }
func (noKeys) Settle(handle, int64, []window.Bucket, int64, []int64, window.Bucket) []window.Bucket {
	return nil
}
func (noKeys) Release(handle, int64, int64, bool) (int64, bool) { return 0, true }
func (noKeys) Want(handle, int64, int64) int64                  { return 0 }
func (noKeys) NextWant(handle, int64, int64) int64              { return 0 }
func (noKeys) MarkDirty(handle)                                 {}
func (noKeys) Early(dst []handle) []handle                      { return dst }
func (noKeys) OnEarly(func())                                   {}
func (noKeys) Need(handle, int64) bool                          { return true }
func (noKeys) Park(handle)                                      {}
func (noKeys) Unsynced(dst []handle, _ int64) []handle          { return dst }
func (noKeys) View(_ handle, _ int64, dst []window.Bucket) []window.Bucket {
	return dst
}
func (noKeys) Leased(_ handle, _ int64, dst []window.Bucket) []window.Bucket {
	return dst
}
func (noKeys) Viewed(dst []handle, _ int64) []handle { return dst }

// nameRule returns a rule of no keys, for naming them.
func nameRule(name string, geo window.Sliding) *testRule {
	return &testRule{cfg: syncport.RuleConfig{Name: name, Geometry: geo, Limit: 1, Keys: noKeys{}}}
}

func TestKeyName(t *testing.T) {
	t.Parallel()
	cases := []struct {
		prefix, name string
		geo          window.Sliding
		key, want    string
	}{
		{"t", "api", window.NewSliding(time.Minute, 6), "user:1", "t:{api:user%3A1}:10000000"},
		{"t", "api", window.NewFixed(time.Second), "k", "t:{api:k}:1000000"},
		{"t", "api", window.NewSliding(time.Second, 1), "k", "t:{api:k}:1000000"},
		{"sluice:prod", "login.v2", window.NewSliding(time.Millisecond, 1000), "k", "sluice:prod:{login.v2:k}:1"},
		{"t", "api", window.NewSliding(time.Hour, 60), "", "t:{api:}:60000000"},
		{"t", "api", window.NewSliding(time.Minute, 6), "{evil}:x", "t:{api:%7Bevil%7D%3Ax}:10000000"},
		{"t", "api", window.NewSliding(time.Minute, 6), "a b", "t:{api:a%20b}:10000000"},
	}
	cfg := func(prefix string) Config {
		return Config{Client: dummyClient, Prefix: prefix, InstanceID: "x", Interval: time.Second,
			Timeout: time.Second, Clock: fixedClock(0)}
	}
	for _, tc := range cases {
		r := nameRule(tc.name, tc.geo)
		_, err := newSyncer(cfg(tc.prefix), r)
		require.NoError(t, err)
		got := r.keyName(tc.key)
		assert.Equal(t, tc.want, got)
		assert.Equal(t, tc.name+":"+string(keyname.Encode(nil, tc.key)), hashTag(got),
			"the hash tag holds the rule and the key, so one limiter key is one slot")
		assert.Equal(t, 1, strings.Count(got, "{"), "one '{' in %q", got)
		assert.Equal(t, 1, strings.Count(got, "}"), "one '}' in %q", got)
	}

	// The same rule with another geometry (in another syncer: one syncer
	// refuses two rules of one name): another Redis key, same slot.
	r1 := nameRule("api", window.NewSliding(time.Minute, 6))
	r2 := nameRule("api", window.NewSliding(time.Minute, 3))
	_, err := newSyncer(cfg("t"), r1)
	require.NoError(t, err)
	_, err = newSyncer(cfg("t"), r2)
	require.NoError(t, err)
	assert.NotEqual(t, r1.keyName("k"), r2.keyName("k"))
	assert.Equal(t, hashTag(r1.keyName("k")), hashTag(r2.keyName("k")))
}
