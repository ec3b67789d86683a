// Package mach is the machinery of the fixture.
package mach

// Used is called by package user.
func Used() int { return 1 }

// Unused is called by no other package.
func Unused() int { return 2 }

// TestOnly is called by package user's tests only.
func TestOnly() int { return 3 }

// T is named by package user.
type T struct{}

// Used is called by package user.
func (T) Used() int { return 4 }

// Unused is called by no other package.
func (T) Unused() int { return 5 }

// String is called by fmt.
func (T) String() string { return "T" }

// Impl is handed to package user as a Doer.
type Impl struct{}

// Do is called through user.Doer.
func (Impl) Do() {}

// Made is the result of Make: package user never names it.
type Made struct{}

// Make is called by package user.
func Make() Made { return Made{} }
