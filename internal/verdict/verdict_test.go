package verdict

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStatusString(t *testing.T) {
	t.Parallel()
	for s, want := range map[Status]string{
		Allowed: "allowed", OverLimit: "over-limit", OverCap: "over-cap", StoreDown: "store-down", Status(9): "Status(9)",
	} {
		assert.Equal(t, want, s.String())
	}
}
