package config

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/api"
	"gopkg.in/yaml.v3"
)

// TestRangesMatchOpenAPI: the ranges the OpenAPI document gives the config
// settings (the Config schema's minimum and maximum, and "MIN to MAX" at
// the start of a duration's description) are the ranges Parse enforces: both ends are
// accepted and one step beyond each is refused naming the key. Every
// integer and duration setting must document its range, so a new setting
// cannot be added without one.
func TestRangesMatchOpenAPI(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]*rangeSchema `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(api.YAML(), &doc); err != nil {
		t.Fatal(err)
	}
	schemas := doc.Components.Schemas
	resolve := func(s *rangeSchema) *rangeSchema {
		if s != nil && s.Ref != "" {
			return schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
		}
		return s
	}
	durationRange := regexp.MustCompile(`^(\S+) to ([^\s;,]+)`)
	checked := 0
	var walk func(path []string, s *rangeSchema)
	walk = func(path []string, s *rangeSchema) {
		s = resolve(s)
		if s == nil {
			return
		}
		key := strings.Join(path, ".")
		switch s.Type {
		case "object":
			for name, p := range s.Properties {
				walk(append(path[:len(path):len(path)], name), p)
			}
			if ap, ok := s.AdditionalProperties.(map[string]any); ok && ap["$ref"] != nil {
				walk(append(path[:len(path):len(path)], "somepolicy"), &rangeSchema{Ref: ap["$ref"].(string)})
			}
		case "integer":
			if s.Minimum == nil || s.Maximum == nil {
				t.Errorf("%s: the Config schema gives no minimum and maximum", key)
				return
			}
			lo, hi := *s.Minimum, *s.Maximum
			checkRange(t, path, fmt.Sprint(lo), fmt.Sprint(hi), fmt.Sprint(lo-1), fmt.Sprint(hi+1), lo-1 != 0)
			checked++
		case "string":
			if !isDuration(path) {
				return
			}
			m := durationRange.FindStringSubmatch(s.Description)
			if m == nil {
				t.Errorf("%s: the description %q does not give the range as \"MIN to MAX\"", key, s.Description)
				return
			}
			lo, err1 := time.ParseDuration(m[1])
			hi, err2 := time.ParseDuration(m[2])
			if err1 != nil || err2 != nil {
				t.Errorf("%s: %q is not a duration range", key, s.Description)
				return
			}
			checkRange(t, path, lo.String(), hi.String(), (lo - time.Millisecond).String(), (hi + time.Millisecond).String(), true)
			checked++
		}
	}
	walk(nil, schemas["Config"])
	t.Logf("%d settings checked", checked)
	if checked < 20 {
		t.Errorf("only %d settings with a range in the Config schema", checked)
	}
}

// rangeSchema is what TestRangesMatchOpenAPI reads of a schema.
type rangeSchema struct {
	Ref                  string                  `yaml:"$ref"`
	Type                 any                     `yaml:"type"`
	Description          string                  `yaml:"description"`
	Minimum              *int64                  `yaml:"minimum"`
	Maximum              *int64                  `yaml:"maximum"`
	Properties           map[string]*rangeSchema `yaml:"properties"`
	AdditionalProperties any                     `yaml:"additionalProperties"`
}

// isDuration reports whether the setting at path is a Duration.
func isDuration(path []string) bool {
	last := path[len(path)-1]
	return strings.HasSuffix(last, "timeout") || last == "ttl" || last == "max_retry_wait"
}

// checkRange checks that the setting at path takes lo and hi and refuses
// below and above (below only when checkBelow: 0 means the default).
func checkRange(t *testing.T, path []string, lo, hi, below, above string, checkBelow bool) {
	t.Helper()
	key := strings.Join(path, ".")
	file := func(v string) []byte {
		var b strings.Builder
		for i, p := range path {
			fmt.Fprintf(&b, "%s%s:", strings.Repeat("  ", i), p)
			if i == len(path)-1 {
				b.WriteString(" " + v)
			}
			b.WriteString("\n")
		}
		return []byte(b.String())
	}
	for _, v := range []string{lo, hi} {
		if _, err := Parse(file(v), "test"); err != nil {
			t.Errorf("%s: %s is in the documented range but refused: %v", key, v, err)
		}
	}
	bad := []string{above}
	if checkBelow {
		bad = append(bad, below)
	}
	for _, v := range bad {
		_, err := Parse(file(v), "test")
		if err == nil || !strings.Contains(err.Error(), key+": ") {
			t.Errorf("%s: %s is outside the documented range; Parse = %v", key, v, err)
		}
	}
}
