// Package redistest starts throwaway Redis servers and clusters for tests.
package redistest
