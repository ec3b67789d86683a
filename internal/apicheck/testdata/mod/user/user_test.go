package user

import (
	"testing"

	"example.com/lib/mach"
)

func TestTestOnly(t *testing.T) {
	if mach.TestOnly() != 3 {
		t.Fatal("TestOnly")
	}
}
