package keyname_test

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/keyname"
)

// A limiter key sits inside a Redis key percent-encoded: it can neither
// break out of the hash tag nor make two keys share one.
func ExampleEncode() {
	fmt.Println(string(keyname.Encode(nil, "user:42")))
	fmt.Println(string(keyname.Encode(nil, "a}{b c%")))
	// Output:
	// user%3A42
	// a%7D%7Bb%20c%25
}
