package config

import (
	"encoding/json"
	"fmt"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration written as Go writes durations: "300ms",
// "10s", "1h30m". A bare number is rejected (it would be ambiguous).
type Duration time.Duration

// D returns the duration as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String returns the duration in Go's notation.
func (d Duration) String() string { return time.Duration(d).String() }

// IsZero reports whether d is zero (yaml.v3's omitempty uses it).
func (d Duration) IsZero() bool { return d == 0 }

func parseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (want e.g. \"300ms\", \"10s\", \"2m\")", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("duration %q is negative", s)
	}
	return Duration(v), nil
}

// UnmarshalYAML reads "300ms".
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a duration such as \"300ms\"", n.Line)
	}
	v, err := parseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %v", n.Line, err)
	}
	*d = v
	return nil
}

// MarshalYAML writes "300ms".
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalJSON writes "300ms".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads "300ms".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"300ms\"")
	}
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}
