package compile

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/score"
)

// mappingSampleSize is how many records the field mapping is checked against:
// enough to find a field that only some records have, few enough to be instant.
const mappingSampleSize = 100

// checkData checks what only the data can tell, before any call: that the
// fields mapping names fields the records have, that prompts are not all
// empty (a mapping that misses the input would send empty prompts to a paid
// model), and that ids are unique. path is the dataset's spec path.
func checkData(spec *v1alpha1.EvaluationSpec, ds *v1alpha1.Dataset, path string, d *runner.Dataset, prompt *runner.Prompt) error {
	var head []dataset.Sample
	err := dataset.EachSample(d.Open, min(d.Total, mappingSampleSize), func(s *dataset.Sample) error {
		if s.Fields != nil {
			head = append(head, *s)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(head) > 0 {
		names := dataset.FieldNames(head)
		if f := ds.Fields; f != nil {
			m := dataset.Mapping{ID: f.ID, Input: f.Input, Expected: f.Expected, Messages: f.Messages, Tools: f.Tools}
			if key, name, ok := m.Unmapped(names); ok {
				return fmt.Errorf("%s.fields.%s: no record has a field %q (the data's fields: %s)", path, key, name, dataset.QuoteNames(names))
			}
		}
		if err := checkPrompts(ds, path, head, names, prompt); err != nil {
			return err
		}
		d.Warnings = append(d.Warnings, numericHints(spec, ds, head)...)
	}
	rep, err := dataset.Check(d.Open, d.Total)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if rep.InvalidUTF8 > 0 {
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: dataset %q: %d record(s) hold bytes that are not UTF-8 (the first at %s %d): "+
			"they are sent, scored and recorded with U+FFFD in their place; convert the file to UTF-8 to send them as meant",
			path, ds.Name, rep.InvalidUTF8, rep.Unit, rep.FirstInvalidUTF8))
	}
	return nil
}

// checkPrompts refuses data for which every sampled prompt is empty, when
// empty prompts are errors: each sample would fail, or worse, be paid for.
func checkPrompts(ds *v1alpha1.Dataset, path string, head []dataset.Sample, names []string, prompt *runner.Prompt) error {
	if !prompt.EmptyIsError {
		return nil
	}
	for i := range head {
		// One real prompt and the mapping works: empty ones are per-sample
		// errors. A template that fails is preflight's to report.
		if _, err := prompt.Request(&head[i]); !errors.Is(err, runner.ErrEmptyPrompt) {
			return nil
		}
	}
	input := dataset.DefaultMapping.Input
	if ds.Fields != nil && ds.Fields.Input != "" {
		input = ds.Fields.Input
	}
	if !slices.Contains(names, input) {
		return fmt.Errorf("%s.fields.input: no record has a field %q, so every prompt would be empty (the data's fields: %s); "+
			"name the field that holds the input", path, input, dataset.QuoteNames(names))
	}
	return fmt.Errorf("spec.prompt.template: renders an empty prompt for each of the first %d samples of dataset %q", len(head), ds.Name)
}

// needsPrompt reports whether a model of the plan sends the rendered prompt
// anywhere: chat models do, agents only when a template of theirs uses it.
func needsPrompt(spec *v1alpha1.EvaluationSpec, plan *runner.Plan) bool {
	for _, pm := range plan.Models {
		if pm.JudgeOnly {
			continue
		}
		for i := range spec.Models {
			m := &spec.Models[i]
			if m.Name != pm.Name {
				continue
			}
			if m.Agent == nil {
				return true
			}
			texts := append([]string{m.Agent.Stdin}, m.Agent.Command...)
			for _, f := range m.Agent.Files {
				texts = append(texts, f)
			}
			for _, t := range texts {
				if strings.Contains(t, ".Prompt") {
					return true
				}
			}
		}
	}
	return false
}

// numericHints warns of exact_match scorers comparing numbers as text: when
// every sampled expected answer is a number, an answer "42.0" would score 0
// against "42" in silence. The normalizer number, or the numeric scorer,
// compares them as numbers.
func numericHints(spec *v1alpha1.EvaluationSpec, ds *v1alpha1.Dataset, head []dataset.Sample) []string {
	numbers := 0
	for i := range head {
		if !head[i].HasExpected {
			continue
		}
		if !isNumber(head[i].Expected) {
			return nil
		}
		numbers++
	}
	if numbers == 0 {
		return nil
	}
	var out []string
	for i := range spec.Scoring {
		sc := &spec.Scoring[i]
		if sc.Type != v1alpha1.ScorerExactMatch || slices.Contains(sc.Normalize, v1alpha1.Normalizer(score.NormNumber)) {
			continue
		}
		out = append(out, fmt.Sprintf("spec.scoring[%d]: the expected answers of dataset %q are numbers, which %s compares as text: "+
			"an answer \"42.0\" scores 0 against \"42\"; add number to its normalize to compare them as numbers (or use type: numeric, with a tolerance)",
			i, ds.Name, sc.MetricName()))
	}
	return out
}

// isNumber says an expected answer is a number, or text that is one.
func isNumber(v any) bool {
	switch x := v.(type) {
	case json.Number:
		return true
	case string:
		_, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		return err == nil
	}
	return false
}
