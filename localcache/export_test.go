package localcache

import "github.com/sluicehq/sluice/window"

// Bucket is a count in one sub-window (window.Bucket), named short for the
// tests.
type Bucket = window.Bucket
