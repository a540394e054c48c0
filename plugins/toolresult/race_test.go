//go:build race

package main

// raceEnabled shortens the data sweeps under -race (10x slower).
const raceEnabled = true
