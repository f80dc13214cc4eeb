package admission

import (
	"context"
	"strings"
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// evaluation is a valid Evaluation but for edits (YAML merged over spec).
func evaluation(t *testing.T, spec string) map[string]any {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: e}
spec:
  datasets: [{name: d, source: {inline: [{id: q1, input: "2+2?", expected: "4"}]}}]
  models: [{name: m, provider: openai, model: gpt-4.1-mini}]
  scoring: [{type: exact_match}]
` + spec))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(js, &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func TestValidate(t *testing.T) {
	cluster, err := New("Evaluation")
	if err != nil {
		t.Fatal(err)
	}
	local, err := New("Evaluation", WithoutRule("spec.datasets.source.file", "file is for local runs"))
	if err != nil {
		t.Fatal(err)
	}
	fileSource := "  datasets: [{name: d, source: {file: qs.jsonl}}]\n"
	for _, tt := range []struct {
		name      string
		v         *Validator
		spec      string
		want      []string // substrings, one per error, in order; none: valid
		wantCount int
	}{
		{name: "valid", v: cluster},
		{name: "a rule", v: cluster, spec: "  concurrency: 0\n",
			want: []string{"spec.concurrency: Invalid value: 0: spec.concurrency in body should be greater than or equal to 1"}},
		{name: "a CEL rule", v: cluster, spec: "  scoring: [{type: exact_match, pattern: x}]\n",
			want: []string{"spec.scoring[0]: Invalid value: pattern only applies to the regex scorer"}},
		{name: "a cluster-only rule", v: cluster, spec: fileSource,
			want: []string{"spec.datasets[0].source.file: Invalid value: \"qs.jsonl\": file is for local runs (proctor run) only"}},
		{name: "a cluster-only rule left out", v: local, spec: fileSource},
		{name: "the other rules kept", v: local, spec: "  datasets: [{name: d, source: {file: qs.jsonl, url: \"https://example.com/q\"}}]\n",
			want: []string{"spec.datasets[0].source: Invalid value: exactly one of inline, configMap, url, pvc or file must be set"}},
		{name: "no rules after a type error, as the API server", v: cluster,
			spec: "  concurrency: ten\n  scoring: [{type: exact_match, pattern: x}]\n",
			want: []string{`spec.concurrency: Invalid value: "string": spec.concurrency in body must be of type integer`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			errs := tt.v.Validate(context.Background(), evaluation(t, tt.spec))
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors, want %d: %v", len(errs), len(tt.want), errs)
			}
			for i, w := range tt.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d: %v\nwant it to contain %q", i, errs[i], w)
				}
			}
		})
	}
}

func TestNew(t *testing.T) {
	for _, kind := range []string{"Evaluation", "ModelEndpoint", "ModelQuota"} {
		if _, err := New(kind); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
	}
	for _, tt := range []struct {
		name, kind string
		opt        Option
		want       string
	}{
		{"no such kind", "Job", nil, `no CRD of kind "Job"`},
		{"no such property", "Evaluation", WithoutRule("spec.datasets.sauce.file", "file is"), "no property sauce"},
		// A reworded rule must not slip back into local runs unnoticed.
		{"no such rule", "Evaluation", WithoutRule("spec.datasets.source.file", "file is for clusters"), `no rule at spec.datasets.source.file says "file is for clusters"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var opts []Option
			if tt.opt != nil {
				opts = append(opts, tt.opt)
			}
			_, err := New(tt.kind, opts...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestWithoutRuleLeavesOthersAlone checks that dropping a rule from one
// Validator's schema leaves the next Validator's whole.
func TestWithoutRuleLeavesOthersAlone(t *testing.T) {
	if _, err := New("Evaluation", WithoutRule("spec.datasets.source.file", "file is for local runs")); err != nil {
		t.Fatal(err)
	}
	v, err := New("Evaluation")
	if err != nil {
		t.Fatal(err)
	}
	if errs := v.Validate(context.Background(), evaluation(t, "  datasets: [{name: d, source: {file: qs.jsonl}}]\n")); len(errs) != 1 {
		t.Errorf("got %v, want the file rule's error", errs)
	}
}

func BenchmarkNewEvaluation(b *testing.B) {
	for b.Loop() {
		if _, err := New("Evaluation"); err != nil {
			b.Fatal(err)
		}
	}
}
