// Package rawmem is the repository's only user of package unsafe: every
// memory trick sluice plays goes through the few functions here, each with
// the rule its caller must keep. TestUnsafeConfined fails if any other Go
// file of the repository (tests and other modules of the workspace
// included) imports unsafe.
//
// The functions fall in four groups:
//
//   - Layout: Sizeof and Offset measure types and fields, for the tests
//     and start-up checks that pin a layout the code relies on; Addr and
//     StringAddr give addresses to compare in such tests.
//   - Records: At, Before and StringBefore reach a value at a byte offset
//     from a pointer into a larger allocation (localcache keeps one key's
//     state in one allocation, its key before the header and its slot
//     words after, and reaches them from a pointer to the header). They
//     are as unchecked as the pointer arithmetic they wrap: the caller
//     must know the allocation's layout, and pins it with Sizeof and
//     Offset in its tests.
//   - Strings: String views bytes as a string without a copy (the bytes
//     must not be written while the string is in use); Same tells two
//     strings that share their bytes.
//   - StackAddr hints which goroutine runs (engine's counter stripes).
//
// Everything here is small enough to inline, and does: using it costs what
// the unsafe expression it wraps costs.
package rawmem

import "unsafe"

// Sizeof returns the size in bytes of a value of type T, as unsafe.Sizeof.
func Sizeof[T any]() uintptr {
	var v T
	return unsafe.Sizeof(v)
}

// Offset returns the byte offset of *field from the start of *base: with
// field a pointer to a field of the struct base points to, the field's
// offset (unsafe.Offsetof). It panics if *field does not lie within *base.
func Offset[T, F any](base *T, field *F) uintptr {
	b, f := uintptr(unsafe.Pointer(base)), uintptr(unsafe.Pointer(field))
	if f < b || f+unsafe.Sizeof(*field) > b+unsafe.Sizeof(*base) {
		panic("rawmem: field outside its base")
	}
	return f - b
}

// At returns a pointer to the U that starts off bytes after the start of
// *p. Rule: p points into an allocation that holds a U at that offset,
// aligned for U, and nothing else uses those bytes as another type.
// Typically *p is a header field of a struct and the U a later field, or
// an element of a later array field, whose offset the caller computed from
// the struct's layout (checked with Offset).
func At[U, T any](p *T, off uintptr) *U {
	return (*U)(unsafe.Add(unsafe.Pointer(p), off))
}

// Before returns a pointer to the U that ends where *p starts. Rule: p
// points into an allocation that holds a U right before *p, with no padding
// between them (typically the struct field just before *p's field, whose
// size is a multiple of *p's alignment), aligned for U.
func Before[U, T any](p *T) *U {
	var u U
	return (*U)(unsafe.Add(unsafe.Pointer(p), -int(unsafe.Sizeof(u))))
}

// StringBefore returns the n bytes that end where *p starts, as a string,
// without copying them. Rule: those bytes are in the allocation that holds
// *p, and nothing writes them while the string or a substring of it is
// reachable (see String).
func StringBefore[T any](p *T, n int) string {
	return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(p), -n)), n)
}

// String returns a string that holds b's bytes, without copying them.
// Rule: nothing writes b's bytes (through b or any slice sharing them)
// after the call, for as long as the string or a substring of it is
// reachable: a string's bytes must not change.
func String(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// Same reports whether a and b are the same bytes at the same address: the
// same length, sharing their data. Same implies a == b; a == b does not
// imply Same (equal bytes in two places; two empty strings may or may not
// be the same).
func Same(a, b string) bool {
	return unsafe.StringData(a) == unsafe.StringData(b) && len(a) == len(b)
}

// Addr returns the address of *p, for tests of a layout and for hashing. A
// uintptr does not keep *p alive, and is no pointer: nothing may convert it
// back.
func Addr[T any](p *T) uintptr {
	return uintptr(unsafe.Pointer(p))
}

// StringAddr returns the address of s's bytes (see Addr).
func StringAddr(s string) uintptr {
	return uintptr(unsafe.Pointer(unsafe.StringData(s)))
}

// StackAddr returns an address on the calling goroutine's stack. Two
// goroutines running at once get addresses at least the smallest stack size
// (2 KiB) apart, and a goroutine mostly keeps its own: a cheap hint of which
// goroutine is running, to spread writes over stripes. It is not an
// identity: a stack moves when it grows, and a goroutine's stack may be
// reused by another after it exits.
func StackAddr() uintptr {
	var b byte
	return uintptr(unsafe.Pointer(&b))
}
