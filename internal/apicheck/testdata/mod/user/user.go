// Package user uses the fixture's machinery.
package user

import "example.com/lib/mach"

// Doer does.
type Doer interface{ Do() }

// Run calls d.Do.
func Run(d Doer) { d.Do() }

// All uses what it uses.
func All() int {
	var t mach.T
	Run(mach.Impl{})
	_ = mach.Make()
	return mach.Used() + t.Used()
}
