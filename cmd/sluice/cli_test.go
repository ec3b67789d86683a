package main

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
)

// runCLI runs sluice with args and returns its exit status and output.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestValidate(t *testing.T) {
	t.Parallel()
	good := writeFile(t, "good.yaml", envoyConfig)
	sluiceFmt := writeFile(t, "rules.yaml", "rules:\n  - name: api\n    limit: 10\n    window: 1m\n")
	bad := writeFile(t, "bad.yaml", "domain: test\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 3\n")
	typo := writeFile(t, "typo.yaml", "rules:\n  - name: api\n    limt: 10\n    window: 1m\n")

	code, out, errOut := runCLI("validate", good, sluiceFmt)
	assert.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, good+`: ok: envoy configuration, domain "test", 3 top-level descriptors, 2 rules`)
	assert.Contains(t, out, sluiceFmt+": ok: sluice configuration, 1 rule")
	assert.Empty(t, errOut)

	code, out, errOut = runCLI("validate", good, bad, typo)
	assert.Equal(t, exitError, code)
	assert.Contains(t, out, good+": ok")
	assert.Contains(t, errOut, bad+`:5:13: descriptors[0].rate_limit.unit: "fortnight" is not a unit`)
	assert.Contains(t, errOut, typo+":3:5:")
	assert.Contains(t, errOut, "limt")

	code, _, errOut = runCLI("validate", writeFile(t, "x", "")+".missing")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "no such file")

	code, _, _ = runCLI("validate")
	assert.Equal(t, exitUsage, code)
}

func TestCheck(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "rl.yaml", envoyConfig)
	code, out, errOut := runCLI("check", "-config", cfg, "user=alice")
	require.Equal(t, exitOK, code, errOut)
	assert.Regexp(t, `^rule=test\.user key="alice" allowed=true limit=3 remaining=2 reset_after=\S+ retry_after=0s\n$`, out)

	code, out, _ = runCLI("check", "-config", cfg, "tenant=x")
	assert.Equal(t, exitOK, code)
	assert.Equal(t, "domain=test descriptor=tenant=x: no limit applies\n", out)

	code, _, errOut = runCLI("check", "-config", cfg, "user")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "is not KEY=VALUE")

	// The fleet's count, through Redis: each check is a new process's
	// limiter, so only the store remembers the ones before.
	rdb := redistest.Start(t)
	args := []string{"check", "-config", cfg, "-redis", rdb.Addr(), "-prefix", "cli"}
	for i := range 3 {
		code, out, errOut = runCLI(append(args, "user=bob")...)
		require.Equal(t, exitOK, code, "check %d: %s%s", i+1, out, errOut)
	}
	code, out, _ = runCLI(append(args, "user=bob")...)
	assert.Equal(t, exitDenied, code, out)
	assert.Contains(t, out, "allowed=false limit=3 remaining=0")
	code, _, _ = runCLI(append(args, "user=dan", "-n", "3")...)
	assert.Equal(t, exitUsage, code, "flags go before the descriptor")
	code, out, _ = runCLI(append(args, "-n", "3", "user=dan")...)
	assert.Equal(t, exitOK, code, out)
	assert.Contains(t, out, "allowed=true limit=3 remaining=0")
	code, _, _ = runCLI(append(args, "-n", "0", "user=dan")...)
	assert.Equal(t, exitUsage, code)

	// Within a new process's share of the error budget the decision is
	// local; what is left is read back from the fleet's store.
	big := writeFile(t, "big.yaml", "domain: test\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n")
	for i := range 3 {
		code, out, errOut = runCLI("check", "-config", big, "-redis", rdb.Addr(), "-prefix", "cli", "user=erin")
		require.Equal(t, exitOK, code, errOut)
		assert.Contains(t, out, fmt.Sprintf("limit=1000 remaining=%d ", 999-i))
	}

	rules := writeFile(t, "rules.yaml", "rules:\n  - name: api\n    limit: 1\n    window: 1m\n")
	code, out, _ = runCLI("check", "-config", rules, "api", "k")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, `rule=api key="k" allowed=true limit=1 remaining=0`)
	code, _, errOut = runCLI("check", "-config", rules, "nope", "k")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "unknown rule")
}

func TestUsage(t *testing.T) {
	t.Parallel()
	code, out, _ := runCLI("-h")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "sluice serve -config FILE")
	code, _, errOut := runCLI("frobnicate")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, `unknown command "frobnicate"`)
	code, _, errOut = runCLI("serve")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "-config FILE is required")
}
