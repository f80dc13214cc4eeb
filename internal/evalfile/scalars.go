package evalfile

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"

	yamlv2 "go.yaml.in/yaml/v2"
	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/proctor-dev/proctor/runner/dataset"
)

// inlineScalars finds the unquoted values of inline dataset items that YAML
// reads as something other than the text written: `expected: no` is false,
// `0.10` is 0.1, `id: 007` is 7, so a sample's text would silently become
// "false", "0.1" or "7". The manifest is read as Kubernetes reads it (YAML
// 1.1, sigs.k8s.io/yaml, as kubectl does too), so such a value cannot be kept
// as written without a cluster reading the same file differently: each is a
// problem naming its field and line, to be quoted.
func inlineScalars(doc []byte) []string {
	var root yamlv3.Node
	if yamlv3.Unmarshal(doc, &root) != nil || len(root.Content) == 0 {
		return nil // not YAML this reader takes: the strict decoder says why
	}
	datasets := child(child(root.Content[0], "spec"), "datasets")
	if datasets == nil || datasets.Kind != yamlv3.SequenceNode {
		return nil
	}
	var problems []string
	for i, d := range datasets.Content {
		inline := child(child(d, "source"), "inline")
		if inline == nil || inline.Kind != yamlv3.SequenceNode {
			continue
		}
		// The fields read as text: the sample's id, input and expected
		// answer (others are data for templates, numbers as well as text).
		fields := child(d, "fields")
		text := []string{
			cmp.Or(scalar(child(fields, "id")), dataset.DefaultMapping.ID),
			cmp.Or(scalar(child(fields, "input")), dataset.DefaultMapping.Input),
			cmp.Or(scalar(child(fields, "expected")), dataset.DefaultMapping.Expected),
		}
		for j, item := range inline.Content {
			for _, name := range text {
				if v := child(item, name); v != nil {
					walkScalars(v, fmt.Sprintf("spec.datasets[%d].source.inline[%d].%s", i, j, name), &problems)
				}
			}
		}
	}
	if len(problems) > maxScalarProblems {
		n := len(problems) - maxScalarProblems
		problems = append(problems[:maxScalarProblems], fmt.Sprintf("spec.datasets: and %d more unquoted values of inline items that YAML reads as something else: quote them", n))
	}
	return problems
}

// maxScalarProblems bounds the values named: a dataset of a hundred
// unquoted answers needs one fix, said a few times.
const maxScalarProblems = 5

// scalar is n's text when it is a scalar, else "".
func scalar(n *yamlv3.Node) string {
	if n == nil || n.Kind != yamlv3.ScalarNode {
		return ""
	}
	return n.Value
}

// child is the value of key in mapping n, or nil.
func child(n *yamlv3.Node, key string) *yamlv3.Node {
	if n == nil || n.Kind != yamlv3.MappingNode {
		return nil
	}
	for k := 0; k+1 < len(n.Content); k += 2 {
		if n.Content[k].Value == key {
			return n.Content[k+1]
		}
	}
	return nil
}

func walkScalars(n *yamlv3.Node, path string, problems *[]string) {
	switch n.Kind {
	case yamlv3.MappingNode:
		for k := 0; k+1 < len(n.Content); k += 2 {
			walkScalars(n.Content[k+1], path+"."+n.Content[k].Value, problems)
		}
	case yamlv3.SequenceNode:
		for k, c := range n.Content {
			walkScalars(c, fmt.Sprintf("%s[%d]", path, k), problems)
		}
	case yamlv3.ScalarNode:
		if n.Style != 0 {
			return // quoted, or a block scalar: text as written
		}
		if read, changed := readAs(n.Value); changed {
			kind := "the number"
			if _, ok := read.(bool); ok {
				kind = "the boolean"
			}
			*problems = append(*problems, fmt.Sprintf("%s: line %d: the unquoted value %s is read by YAML as %s %s, so the sample would hold %q, not %q: quote it (\"%s\") to keep it as written",
				path, n.Line, n.Value, kind, jsonText(read), jsonText(read), n.Value, n.Value))
		}
	}
}

// readAs is what Kubernetes' YAML reader makes of a plain scalar, and
// whether its text is not the one written.
func readAs(text string) (any, bool) {
	var v any
	if yamlv2.Unmarshal([]byte(text), &v) != nil {
		return nil, false
	}
	switch x := v.(type) {
	case string, nil:
		// A string is as written; null (~, null, empty) means no value.
		return v, false
	case bool:
		return x, strconv.FormatBool(x) != text
	default:
		return x, jsonText(x) != text
	}
}

// jsonText is v as a sample's text: its JSON, as the data is read.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
