// Package metrics is the Prometheus side of the bridge: an observe.Observer that counts
// and times what the core packages report (per route, looked up once per route), the
// collectors read at scrape time (store counts, readiness checks, Go runtime), and the
// recent-history series the console's charts draw. Metric names are docs/CONTRACT.md's;
// every one starts with the "delaybridge_" namespace.
package metrics
