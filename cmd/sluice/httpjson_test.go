package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
)

func TestServeJSON(t *testing.T) {
	t.Parallel()
	s := startServe(t, "-config", writeFile(t, "rl.yaml", envoyConfig), "-http", "127.0.0.1:0")
	require.NotEmpty(t, s.http)
	do := func(method, path, body string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, "http://"+s.http+path, strings.NewReader(body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	body := `{"domain": "test", "descriptors": [{"entries": [{"key": "user", "value": "kim"}]}]}`
	for i := range 3 {
		code, out := do("POST", "/json", body)
		require.Equal(t, http.StatusOK, code, out)
		var resp rlspb.RateLimitResponse
		require.NoError(t, protojson.Unmarshal([]byte(out), &resp), out)
		assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
		assert.Equal(t, uint32(2-i), resp.Statuses[0].LimitRemaining)
		assert.Equal(t, uint32(3), resp.Statuses[0].CurrentLimit.GetRequestsPerUnit())
	}
	code, out := do("POST", "/json", body)
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Contains(t, out, `"overallCode":"OVER_LIMIT"`)

	many := `{"domain": "test", "descriptors": [` + strings.Repeat(`{"entries": [{"key": "user", "value": "x"}]},`, 100) + `{"entries": [{"key": "user", "value": "x"}]}]}`
	for _, tc := range []struct {
		method, path, body string
		code               int
		msg                string
	}{
		{"POST", "/json", `{"domain": "test", "descriptors": [`, http.StatusBadRequest, "not a RateLimitRequest"},
		{"POST", "/json", `{"domain": "test", "nope": 1}`, http.StatusBadRequest, "nope"},
		{"POST", "/json", many, http.StatusBadRequest, "101 descriptors: at most 64"},
		{"POST", "/json", `{"domain": "test", "descriptors": [{"entries": [{"key": "user", "value": "` + strings.Repeat("v", 2000) + `"}]}]}`, http.StatusBadRequest, "the value has 2000 bytes"},
		{"POST", "/json", strings.Repeat(" ", 5<<20), http.StatusRequestEntityTooLarge, "over 4 MiB"},
		{"GET", "/json", "", http.StatusMethodNotAllowed, ""},
		{"GET", "/healthcheck", "", http.StatusOK, "OK"},
	} {
		code, out := do(tc.method, tc.path, tc.body)
		assert.Equal(t, tc.code, code, "%s %s %.60s: %s", tc.method, tc.path, tc.body, out)
		assert.Contains(t, out, tc.msg, "%s %s %.60s", tc.method, tc.path, tc.body)
	}
	// The limiter's metrics: kim's 3 admissions and 1 denial.
	code, out = do("GET", "/metrics", "")
	require.Equal(t, http.StatusOK, code)
	assert.Regexp(t, `(?m)^sluice_checks_total\{[^}]*outcome="allowed"[^}]*rule="test\.user"[^}]*\} 3$`, out)
	assert.Regexp(t, `(?m)^sluice_checks_total\{[^}]*outcome="denied"[^}]*rule="test\.user"[^}]*\} 1$`, out)

	// The server still answers after the refused requests.
	code, out = do("POST", "/json", `{"domain": "test", "descriptors": [{"entries": [{"key": "user", "value": "lee"}]}]}`)
	assert.Equal(t, http.StatusOK, code, out)
}
