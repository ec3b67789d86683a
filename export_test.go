package sluice

import "context"

// SetWaitAdmitted sets the hook that sees each queued waiter's context as it
// is admitted, in admission order (nil: none). Tests only.
func SetWaitAdmitted(h func(ctx context.Context)) { waitAdmitted = h }
