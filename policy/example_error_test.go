package policy_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/policy"
)

// A ConfigError says where a configuration is wrong and how to fix it: a
// program that reloads its rules can log the field and keep the old ones.
func ExampleConfigError() {
	_, err := policy.Load(strings.NewReader(`
rules:
  - name: api
    limit: 100
    window: 1 minute
`))
	var ce *policy.ConfigError
	if errors.As(err, &ce) {
		fmt.Println(ce.Line, ce.Field, errors.Is(err, policy.ErrInvalidConfig))
		fmt.Println(ce.Msg)
	}
	// Output:
	// 5 rules[0].window true
	// "1 minute" is not a duration: write one such as 1s, 1m or 24h
}
