// Package systemtest runs sluice's system tests: limiter fleets against real redis-server processes and clusters, under injected faults.
package systemtest
