package mach

import "testing"

func TestOwn(t *testing.T) {
	if Unused() != 2 || (T{}).Unused() != 5 {
		t.Fatal("own tests are no uses")
	}
}
