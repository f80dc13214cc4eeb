// Package tmpl is the one way Proctor parses user templates (prompts, agent
// commands and files, judge rubrics): Go text/template where a missing key is an
// error rather than "<no value>", plus a few helpers.
package tmpl

import (
	"encoding/json"
	"strings"
	"text/template"
)

// Funcs are the helpers every template may use.
var Funcs = template.FuncMap{
	// toJSON encodes a value, e.g. {{ toJSON .Sample.tools }}.
	"toJSON": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"trim":  strings.TrimSpace,
	"lower": strings.ToLower,
	"upper": strings.ToUpper,
	"join": func(sep string, v []any) string {
		parts := make([]string, len(v))
		for i, x := range v {
			b, _ := json.Marshal(x)
			if s, ok := x.(string); ok {
				parts[i] = s
			} else {
				parts[i] = string(b)
			}
		}
		return strings.Join(parts, sep)
	},
}

// Parse parses a template named name.
func Parse(name, text string) (*template.Template, error) {
	return template.New(name).Option("missingkey=error").Funcs(Funcs).Parse(text)
}

// Execute renders t over data.
func Execute(t *template.Template, data any) (string, error) {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}
