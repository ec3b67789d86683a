package policy_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/policy"
)

func ExampleRule_Validate() {
	login := policy.Rule{Name: "login", Limit: 5, Window: time.Minute, Mode: policy.Strict}
	fmt.Println(login.Validate())

	for _, r := range []policy.Rule{
		{Name: "api:v1", Limit: 100, Window: time.Second},
		{Name: "api", Limit: 100, Window: time.Second, Precision: 7},
		{Name: "api", Limit: 100, Window: 500 * time.Microsecond},
	} {
		err := r.Validate()
		fmt.Println(errors.Is(err, policy.ErrInvalidRule), err)
	}
	// Output:
	// <nil>
	// true invalid rule "api:v1": Name has ':' at byte 3; use only letters, digits, '_', '.' and '-'
	// true invalid rule "api": Window 1s does not split into 7 sub-windows of whole microseconds: pick a Precision that divides it
	// true invalid rule "api": Window 500µs is out of range: it must be between 1ms and 8784h0m0s
}
