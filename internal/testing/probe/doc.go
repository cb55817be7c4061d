// Package probe is how a test waits and looks: Until polls a condition
// until it holds or a deadline passes (a test never sleeps to let
// something happen), and Value, Count and Read read a metric's series
// from a Prometheus registry, a snapshot of one (Snapshot) or a
// /metrics page (Scrape). It imports nothing of Harvest, so a test of
// any package may use it; production code never imports it.
package probe
