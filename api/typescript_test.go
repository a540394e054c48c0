package api

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

var update = flag.Bool("update", false, "rewrite clients/ts/src/types.ts from openapi.yaml")

// tsTypesFile is the TypeScript client's types, generated from the
// document's schemas.
const tsTypesFile = "../clients/ts/src/types.ts"

// TestTypeScriptTypes: clients/ts/src/types.ts is what the document's
// schemas generate (go test ./api -run TestTypeScriptTypes -update
// rewrites it).
func TestTypeScriptTypes(t *testing.T) {
	got, err := typeScript()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(tsTypesFile, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(tsTypesFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("%s is not what openapi.yaml generates: run go test ./api -run TestTypeScriptTypes -update", tsTypesFile)
	}
}

// schema is the part of a JSON Schema the generator reads.
type schema struct {
	Ref                  string             `yaml:"$ref"`
	Type                 any                `yaml:"type"`
	Enum                 []string           `yaml:"enum"`
	Const                string             `yaml:"const"`
	Description          string             `yaml:"description"`
	Properties           map[string]*schema `yaml:"properties"`
	Required             []string           `yaml:"required"`
	Items                *schema            `yaml:"items"`
	OneOf                []*schema          `yaml:"oneOf"`
	AnyOf                []*schema          `yaml:"anyOf"`
	AdditionalProperties any                `yaml:"additionalProperties"`
	XStatus              map[string]int     `yaml:"x-status"`
}

// tsNames renames schemas whose names TypeScript already uses.
var tsNames = map[string]string{"Error": "ErrorBody"}

func tsName(ref string) string {
	name := strings.TrimPrefix(ref, "#/components/schemas/")
	if n, ok := tsNames[name]; ok {
		return n
	}
	return name
}

// typeScript generates the declarations of the document's schemas.
func typeScript() (string, error) {
	var doc struct {
		Components struct {
			Schemas map[string]*schema `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(YAML(), &doc); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("// Code generated from api/openapi.yaml by `go test ./api -run TestTypeScriptTypes -update`. DO NOT EDIT.\n\n")
	names := make([]string, 0, len(doc.Components.Schemas))
	for n := range doc.Components.Schemas {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		s := doc.Components.Schemas[name]
		writeDoc(&b, "", s.Description)
		switch {
		case s.Ref != "": // an error answer narrowed to some codes
			fmt.Fprintf(&b, "export type %s = %s;\n\n", tsName(name), tsName(s.Ref))
		case s.Properties != nil:
			fmt.Fprintf(&b, "export interface %s ", tsName(name))
			b.WriteString(object(s, ""))
			b.WriteString("\n\n")
		default:
			fmt.Fprintf(&b, "export type %s = %s;\n\n", tsName(name), tsType(s, ""))
		}
		if s.XStatus != nil {
			fmt.Fprintf(&b, "/** The HTTP status of each %s. */\nexport const %s_STATUS: Readonly<Record<%s, number>> = {\n", name, strings.ToUpper(snake(name)), name)
			for _, code := range s.Enum {
				fmt.Fprintf(&b, "  %s: %d,\n", code, s.XStatus[code])
			}
			b.WriteString("};\n\n")
		}
	}
	return strings.TrimRight(b.String(), "\n") + "\n", nil
}

func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func writeDoc(b *strings.Builder, indent, text string) {
	text = strings.TrimSpace(text)
	if text == "" {
		return
	}
	b.WriteString(indent + "/**\n")
	for _, line := range strings.Split(text, "\n") {
		b.WriteString(strings.TrimRight(indent+" * "+strings.ReplaceAll(line, "*/", "*\\/"), " ") + "\n")
	}
	b.WriteString(indent + " */\n")
}

// object writes an object schema's properties as a TypeScript object type.
func object(s *schema, indent string) string {
	var b strings.Builder
	b.WriteString("{\n")
	props := make([]string, 0, len(s.Properties))
	for p := range s.Properties {
		props = append(props, p)
	}
	sort.Strings(props)
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	// Required properties first, each group by name.
	sort.SliceStable(props, func(i, j int) bool { return required[props[i]] && !required[props[j]] })
	for _, p := range props {
		ps := s.Properties[p]
		writeDoc(&b, indent+"  ", ps.Description)
		opt := "?"
		if required[p] {
			opt = ""
		}
		fmt.Fprintf(&b, "%s  %s%s: %s;\n", indent, p, opt, tsType(ps, indent+"  "))
	}
	switch ap := s.AdditionalProperties.(type) {
	case nil: // open: other fields are allowed (a Message keeps them)
		b.WriteString(indent + "  [key: string]: unknown;\n")
	case map[string]any:
		_ = ap
		b.WriteString(indent + "  [key: string]: unknown;\n")
	}
	b.WriteString(indent + "}")
	return b.String()
}

// refsOnly reports whether every schema of a non-empty list is a $ref.
func refsOnly(list []*schema) bool {
	for _, s := range list {
		if s.Ref == "" {
			return false
		}
	}
	return len(list) > 0
}

// tsType returns the TypeScript type of a schema.
func tsType(s *schema, indent string) string {
	if s.Ref != "" {
		return tsName(s.Ref)
	}
	if s.Const != "" {
		return fmt.Sprintf("%q", s.Const)
	}
	alts := s.OneOf
	if len(alts) == 0 && refsOnly(s.AnyOf) {
		// anyOf of schemas (not of required-member alternatives) is a
		// union too.
		alts = s.AnyOf
	}
	if len(alts) > 0 {
		types := make([]string, len(alts))
		for i, alt := range alts {
			types[i] = tsType(alt, indent)
		}
		return strings.Join(types, " | ")
	}
	if len(s.Enum) > 0 {
		lits := make([]string, len(s.Enum))
		for i, e := range s.Enum {
			lits[i] = fmt.Sprintf("%q", e)
		}
		return strings.Join(lits, " | ")
	}
	var types []string
	switch t := s.Type.(type) {
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			types = append(types, fmt.Sprint(x))
		}
	}
	var out []string
	for _, t := range types {
		switch t {
		case "string":
			out = append(out, "string")
		case "integer", "number":
			out = append(out, "number")
		case "boolean":
			out = append(out, "boolean")
		case "null":
			out = append(out, "null")
		case "array":
			item := "unknown"
			if s.Items != nil {
				item = tsType(s.Items, indent)
				if strings.Contains(item, "|") {
					item = "(" + item + ")"
				}
			}
			out = append(out, item+"[]")
		case "object":
			switch {
			case s.Properties != nil:
				out = append(out, object(s, indent))
			default:
				if ap, ok := s.AdditionalProperties.(map[string]any); ok {
					if ref, ok := ap["$ref"].(string); ok {
						out = append(out, "Record<string, "+tsName(ref)+">")
						continue
					}
				}
				out = append(out, "Record<string, unknown>")
			}
		}
	}
	if len(out) == 0 {
		return "unknown"
	}
	return strings.Join(out, " | ")
}
