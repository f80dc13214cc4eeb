package evalfile_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/evalfile"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// fileName is the name every test gives Decode; each problem line must start with it.
const fileName = "evals/smoke.yaml"

// baseManifest is a small valid Evaluation: one inline dataset, a model under
// evaluation, an anthropic model used as a judge, and two scorers. Every bad case
// below is this manifest with one change.
const baseManifest = `apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata:
  name: smoke
spec:
  datasets:
  - name: arith
    source:
      inline:
      - {id: q1, input: "2+2?", expected: "4"}
  models:
  - name: small
    provider: openai
    model: gpt-4.1-mini
  - name: grader
    provider: anthropic
    model: claude-sonnet-4
  scoring:
  - type: exact_match
  - type: judge
    judge:
      model: grader
`

// edit changes a manifest held as a generic YAML tree.
type edit func(t *testing.T, doc map[string]any)

// set sets the value at path ("spec.models[0].rateLimit"), creating missing
// mappings on the way.
func set(path string, v any) edit {
	return func(t *testing.T, doc map[string]any) {
		t.Helper()
		segs := parsePath(t, path)
		parent := walk(t, doc, path, segs[:len(segs)-1], true)
		put(t, parent, path, segs[len(segs)-1], v)
	}
}

// del removes the key at path.
func del(path string) edit {
	return func(t *testing.T, doc map[string]any) {
		t.Helper()
		segs := parsePath(t, path)
		parent := walk(t, doc, path, segs[:len(segs)-1], false)
		m, ok := parent.(map[string]any)
		last := segs[len(segs)-1]
		if !ok || last.index >= 0 {
			t.Fatalf("del(%q): can only delete a key of a mapping", path)
		}
		if _, ok := m[last.key]; !ok {
			t.Fatalf("del(%q): no such key", path)
		}
		delete(m, last.key)
	}
}

// seg is one step of a path: a mapping key, or a list index (index >= 0).
type seg struct {
	key   string
	index int
}

func parsePath(t *testing.T, path string) []seg {
	t.Helper()
	var segs []seg
	for part := range strings.SplitSeq(path, ".") {
		key, rest, _ := strings.Cut(part, "[")
		if key != "" {
			segs = append(segs, seg{key: key, index: -1})
		}
		for rest != "" {
			num, after, ok := strings.Cut(rest, "]")
			i, err := strconv.Atoi(num)
			if !ok || err != nil {
				t.Fatalf("bad path %q", path)
			}
			segs = append(segs, seg{index: i})
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return segs
}

// walk follows segs from doc and returns the node reached; with create it adds
// missing mappings and lists.
func walk(t *testing.T, doc any, path string, segs []seg, create bool) any {
	t.Helper()
	cur := doc
	for i, s := range segs {
		var next any
		switch c := cur.(type) {
		case map[string]any:
			if s.index >= 0 {
				t.Fatalf("path %q: indexing a mapping", path)
			}
			next = c[s.key]
			if next == nil && create {
				next = newNode(segs, i)
				c[s.key] = next
			}
		case []any:
			if s.index < 0 || s.index >= len(c) {
				t.Fatalf("path %q: index %d out of range", path, s.index)
			}
			next = c[s.index]
		default:
			t.Fatalf("path %q: cannot step into %T", path, cur)
		}
		if next == nil {
			t.Fatalf("path %q: nothing at step %d", path, i)
		}
		cur = next
	}
	return cur
}

func newNode(segs []seg, i int) any {
	if i+1 < len(segs) && segs[i+1].index >= 0 {
		return []any{}
	}
	return map[string]any{}
}

func put(t *testing.T, parent any, path string, s seg, v any) {
	t.Helper()
	switch p := parent.(type) {
	case map[string]any:
		p[s.key] = v
		return
	case []any:
		if s.index >= 0 && s.index < len(p) {
			p[s.index] = v
			return
		}
		t.Fatalf("path %q: index %d out of range (use appendTo to add an item)", path, s.index)
	}
	t.Fatalf("path %q: cannot set a value in %T", path, parent)
}

// appendTo appends v to the list at path.
func appendTo(path string, v any) edit {
	return func(t *testing.T, doc map[string]any) {
		t.Helper()
		segs := parsePath(t, path)
		parent := walk(t, doc, path, segs[:len(segs)-1], true)
		last := segs[len(segs)-1]
		var list []any
		switch p := parent.(type) {
		case map[string]any:
			list, _ = p[last.key].([]any)
			p[last.key] = append(list, v)
		case []any:
			list, _ = p[last.index].([]any)
			p[last.index] = append(list, v)
		}
	}
}

// manifest returns baseManifest with the edits applied, as YAML.
func manifest(t *testing.T, edits ...edit) []byte {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(baseManifest), &doc); err != nil {
		t.Fatalf("base manifest: %v", err)
	}
	for _, e := range edits {
		e(t, doc)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatalf("marshal edited manifest: %v", err)
	}
	return out
}

// obj is shorthand for YAML mappings in edits.
type obj = map[string]any

// agentModel returns a new agent model entry for edits to add to spec.models.
func agentModel() obj {
	return obj{"name": "coder", "provider": "agent", "agent": obj{"command": []any{"coder-cli", "-p", "{{ .Prompt }}"}}}
}

// asEvalfileError checks err is an *evalfile.Error for fileName whose text has
// exactly one line per problem, each starting with the file name.
func asEvalfileError(t *testing.T, err error) *evalfile.Error {
	t.Helper()
	if err == nil {
		t.Fatal("Decode succeeded, want an error")
	}
	var fe *evalfile.Error
	if !errors.As(err, &fe) {
		t.Fatalf("Decode error is %T (%v), want *evalfile.Error", err, err)
	}
	if fe.File != fileName {
		t.Errorf("Error.File = %q, want %q", fe.File, fileName)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(fe.Problems) {
		t.Errorf("error has %d lines for %d problems, want one line per problem:\n%s", len(lines), len(fe.Problems), err)
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, fileName+": ") {
			t.Errorf("error line %d does not start with %q: %q", i+1, fileName+": ", l)
		}
	}
	return fe
}

// endpointDoc is a ModelEndpoint for the base manifest's models to refer to.
const endpointDoc = `apiVersion: proctor.dev/v1alpha1
kind: ModelEndpoint
metadata:
  name: team-key
spec:
  provider: openai
  baseURL: http://localhost:8080/v1
  apiKey: {env: TEAM_KEY}
  headers: {X-Team: evals}
  limits: {requestsPerMinute: 600, outputTokensPerMinute: 90000}
`

// TestDecodeFileResolvesEndpoints: a model with endpointRef takes provider,
// baseURL, key and headers from the file's ModelEndpoint, whatever the
// documents' order, keeping its own rateLimit (a cap) and its reference.
func TestDecodeFileResolvesEndpoints(t *testing.T) {
	manifest := strings.Replace(baseManifest, "provider: openai\n", "endpointRef: {name: team-key, weight: 2}\n    rateLimit: {requestsPerMinute: 100}\n", 1)
	for _, raw := range []string{manifest + "---\n" + endpointDoc, endpointDoc + "---\n" + manifest} {
		f, err := evalfile.DecodeFile("f.yaml", []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		m := f.Evaluation.Spec.Models[0]
		want := v1alpha1.Model{
			Name: m.Name, Model: m.Model, Provider: v1alpha1.ProviderOpenAI, BaseURL: "http://localhost:8080/v1",
			APIKey: &v1alpha1.APIKey{Env: "TEAM_KEY"}, Headers: map[string]string{"X-Team": "evals"},
			EndpointRef: &v1alpha1.EndpointReference{Name: "team-key", Weight: ptr[int32](2)},
			RateLimit:   &v1alpha1.RateLimit{RequestsPerMinute: 100},
		}
		if diff := cmp.Diff(want, m); diff != "" {
			t.Errorf("resolved model (-want +got):\n%s", diff)
		}
		wantLimits := map[string]ratelimit.Limits{"team-key": {RequestsPerMinute: 600, OutputTokensPerMinute: 90000}}
		if diff := cmp.Diff(wantLimits, f.EndpointLimits()); diff != "" {
			t.Errorf("EndpointLimits (-want +got):\n%s", diff)
		}
	}
	// With a ModelQuota in the file, the run has the whole of it, within the
	// endpoint's own limits.
	quota := "---\napiVersion: proctor.dev/v1alpha1\nkind: ModelQuota\nmetadata: {name: account}\nspec:\n  limits: {requestsPerMinute: 300, inputTokensPerMinute: 50000}\n  namespaces: [{name: team-a, weight: 2}]\n"
	f, err := evalfile.DecodeFile("f.yaml", []byte(manifest+"---\n"+endpointDoc+"  quotaRef: {name: account}\n"+quota))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ratelimit.Limits{"team-key": {RequestsPerMinute: 300, InputTokensPerMinute: 50000, OutputTokensPerMinute: 90000}}
	if diff := cmp.Diff(want, f.EndpointLimits()); diff != "" {
		t.Errorf("EndpointLimits within the quota (-want +got):\n%s", diff)
	}
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name string
		// Either edits of the base manifest, or raw YAML.
		edits []edit
		raw   string
		// want are substrings of the error; problems is how many problems (lines)
		// it must report, 1 when 0.
		want     []string
		problems int
	}{
		// YAML itself.
		{
			name: "YAML syntax error names the line",
			raw:  baseManifest + "  concurrency: [\n",
			want: []string{"yaml: line 23: did not find expected node content"},
		},
		{
			name: "tab indentation names the line",
			raw:  "apiVersion: proctor.dev/v1alpha1\n\tkind: Evaluation\n",
			want: []string{"yaml: line 2: found a tab character"},
		},
		{
			name: "duplicate top-level key of spec",
			raw:  baseManifest + "  scoring: []\n",
			want: []string{`line 23: key "scoring" already set in map`},
		},
		{
			name: "duplicate nested key",
			raw:  strings.Replace(baseManifest, "model: gpt-4.1-mini\n", "model: gpt-4.1-mini\n    model: gpt-4.1\n", 1),
			want: []string{`line 15: key "model" already set in map`},
		},
		{
			name: "two YAML documents",
			raw:  baseManifest + "---\n" + baseManifest,
			want: []string{"document 2: a second Evaluation; a file for proctor run holds one Evaluation (and the ModelEndpoints it uses)"},
		},
		{
			name: "endpointRef naming no ModelEndpoint of the file",
			raw:  strings.Replace(baseManifest, "provider: openai\n", "endpointRef: {name: team-key}\n", 1),
			want: []string{`spec.models[0].endpointRef.name: Not found: "team-key"`},
		},
		{
			// The one mistake, not a baseURL the provider's default put there.
			name:     "endpointRef beside provider",
			raw:      strings.Replace(baseManifest, "provider: openai\n", "provider: openai\n    endpointRef: {name: team-key}\n", 1) + "---\n" + endpointDoc,
			want:     []string{"spec.models[0]: Invalid value: a model needs exactly one of provider (with its baseURL and apiKey) or endpointRef"},
			problems: 1,
		},
		{
			name: "endpointRef to another namespace",
			raw:  strings.Replace(baseManifest, "provider: openai\n", "endpointRef: {name: team-key, namespace: other}\n", 1) + "---\n" + endpointDoc,
			want: []string{`spec.models[0].endpointRef.namespace: Invalid value: "other": a ModelEndpoint of another namespace`},
		},
		{
			name: "invalid ModelEndpoint names its document and field",
			raw:  baseManifest + "---\n" + strings.Replace(endpointDoc, "requestsPerMinute: 600", "requestsPerMinute: -1", 1),
			want: []string{`document 2: spec.limits.requestsPerMinute: Invalid value: -1: spec.limits.requestsPerMinute in body should be greater than or equal to 0`},
		},
		{
			name: "negative maxInFlight",
			raw:  baseManifest + "---\n" + strings.Replace(endpointDoc, "requestsPerMinute: 600", "maxInFlight: -2", 1),
			want: []string{`document 2: spec.limits.maxInFlight: Invalid value: -2: spec.limits.maxInFlight in body should be greater than or equal to 0`},
		},
		{
			name: "unknown field of a ModelEndpoint",
			raw:  baseManifest + "---\n" + strings.Replace(endpointDoc, "provider: openai", "provider: openai\n  rpm: 5", 1),
			want: []string{`document 2: unknown field "spec.rpm"`},
		},
		{
			name: "two ModelEndpoints of one name",
			raw:  baseManifest + "---\n" + endpointDoc + "---\n" + endpointDoc,
			want: []string{`document 3: metadata.name: Duplicate value: "team-key"`},
		},
		{
			name: "ModelEndpoint of another provider",
			raw:  baseManifest + "---\n" + strings.Replace(endpointDoc, "provider: openai", "provider: agent", 1),
			want: []string{`document 2: spec.provider: Unsupported value: "agent"`},
		},
		{
			name: "quotaRef naming no ModelQuota of the file",
			raw:  strings.Replace(baseManifest, "provider: openai\n", "endpointRef: {name: team-key}\n", 1) + "---\n" + endpointDoc + "  quotaRef: {name: account}\n",
			want: []string{`ModelEndpoint team-key.spec.quotaRef.name: Not found: "account"`},
		},
		{
			name: "ModelQuota without a limit",
			raw:  baseManifest + "---\napiVersion: proctor.dev/v1alpha1\nkind: ModelQuota\nmetadata: {name: account}\nspec: {limits: {}}\n",
			want: []string{`document 2: spec: Invalid value: a ModelQuota needs at least one limit above 0`},
		},
		{
			name: "only a ModelEndpoint",
			raw:  endpointDoc,
			want: []string{"no Evaluation in the file (it holds only ModelEndpoints)"},
		},
		{
			name: "empty file",
			raw:  "",
			want: []string{"no Evaluation in the file"},
		},
		{
			name: "only comments",
			raw:  "# nothing here yet\n---\n  # still nothing\n",
			want: []string{"no Evaluation in the file"},
		},
		{
			name: "a list, not a mapping",
			raw:  "- apiVersion: proctor.dev/v1alpha1\n- kind: Evaluation\n",
			want: []string{"not a YAML mapping"},
		},
		{
			name: "a scalar, not a mapping",
			raw:  "hello\n",
			want: []string{"not a YAML mapping"},
		},

		// apiVersion and kind.
		{
			name:  "wrong apiVersion",
			edits: []edit{set("apiVersion", "proctor.dev/v1")},
			want:  []string{`apiVersion and kind must be proctor.dev/v1alpha1 and Evaluation, ModelEndpoint or ModelQuota (got "proctor.dev/v1" and "Evaluation")`},
		},
		{
			name:  "wrong kind",
			edits: []edit{set("kind", "ConfigMap")},
			want:  []string{`(got "proctor.dev/v1alpha1" and "ConfigMap")`},
		},
		{
			name:  "missing kind",
			edits: []edit{del("kind")},
			want:  []string{`(got "proctor.dev/v1alpha1" and "")`},
		},

		// metadata.name names the output directory (results/NAME): a path
		// there would write outside it.
		{
			name:  "name climbing out of results/",
			edits: []edit{set("metadata.name", "../../x")},
			want:  []string{`metadata.name: Invalid value: "../../x"`, "RFC 1123 subdomain"},
		},
		{
			name:  "absolute path as name",
			edits: []edit{set("metadata.name", "/etc/x")},
			want:  []string{`metadata.name: Invalid value: "/etc/x"`},
		},
		{
			name:  "upper-case name",
			edits: []edit{set("metadata.name", "Smoke")},
			want:  []string{`metadata.name: Invalid value: "Smoke"`},
		},

		// Unknown fields and wrong types.
		{
			name:  "misspelt model field",
			edits: []edit{set("spec.models[0].rateLimt", obj{"requestsPerMinute": 60})},
			want:  []string{`unknown field "spec.models[0].rateLimt"`},
		},
		{
			name:  "unknown top-level field",
			edits: []edit{set("specs", obj{})},
			want:  []string{`unknown field "specs"`},
		},
		{
			name:  "unknown dataset source",
			edits: []edit{set("spec.datasets[0].source.s3", "s3://bucket/data.jsonl")},
			want:  []string{`unknown field "spec.datasets[0].source.s3"`},
		},
		{
			name:  "unknown judge field",
			edits: []edit{set("spec.scoring[1].judge.prompt", "grade it")},
			want:  []string{`unknown field "spec.scoring[1].judge.prompt"`},
		},
		{
			name:     "two unknown fields, one line each",
			edits:    []edit{set("spec.foo", 1), set("spec.models[1].temprature", 0.5)},
			want:     []string{`unknown field "spec.foo"`, `unknown field "spec.models[1].temprature"`},
			problems: 2,
		},
		{
			name:  "string concurrency",
			edits: []edit{set("spec.concurrency", "ten")},
			want:  []string{`spec.concurrency: Invalid value: "string": spec.concurrency in body must be of type integer`},
		},
		{
			name:  "string model concurrency names the list",
			edits: []edit{set("spec.models[0].concurrency", "ten")},
			want:  []string{`spec.models[0].concurrency: Invalid value: "string"`},
		},
		{
			name:  "string model concurrency names the model's index",
			edits: []edit{set("spec.models[1].concurrency", "ten")},
			want:  []string{`spec.models[1].concurrency: Invalid value: "string"`},
		},
		{
			name:  "string dataset limit names the dataset's index",
			edits: []edit{set("spec.datasets[0].limit", "all")},
			want:  []string{`spec.datasets[0].limit: Invalid value: "string": spec.datasets[0].limit in body must be of type integer`},
		},
		{
			name:  "fractional maxAttempts",
			edits: []edit{set("spec.retry.maxAttempts", 1.5)},
			// kube-openapi says it twice, as the API server does.
			want:     []string{`spec.retry.maxAttempts: Invalid value: "float64": spec.retry.maxAttempts in body must be of type int32`},
			problems: 2,
		},
		{
			name:  "models as a mapping",
			edits: []edit{set("spec.models", obj{"name": "small"})},
			want:  []string{`spec.models: Invalid value: "object": spec.models in body must be of type array`},
		},
		{
			name:  "duration without a unit",
			edits: []edit{set("spec.timeoutPerSample", "5 minutes")},
			want:  []string{`spec.timeoutPerSample: Invalid value: "5 minutes": must be a duration longer than 0s and at most 24h, such as 90s, 2m or 1h30m`},
		},
		{
			name:  "bad agent timeout",
			edits: []edit{appendTo("spec.models", obj{"name": "coder", "provider": "agent", "agent": obj{"command": []any{"x"}, "timeout": "soon"}})},
			want:  []string{`spec.models[2].agent.timeout: Invalid value: "soon": must be a duration longer than 0s and at most 24h, such as 90s, 2m or 1h30m`},
		},
		{
			name:  "temperature not a number",
			edits: []edit{set("spec.models[0].parameters", obj{"temperature": "hot"})},
			want:  []string{`spec.models[0].parameters.temperature: Invalid value: "string": spec.models[0].parameters.temperature in body must be of type number`},
		},
		{
			name:  "status block",
			edits: []edit{set("status", obj{"phase": "Succeeded"})},
			want:  []string{"status: set by Proctor"},
		},
		{
			name:  "status block with results",
			edits: []edit{set("status", obj{"results": []any{obj{"model": "small", "dataset": "arith", "total": 1, "completed": 1, "errored": 0}}})},
			want:  []string{"status: set by Proctor"},
		},

		// Datasets.
		{
			name:  "bad dataset name",
			edits: []edit{set("spec.datasets[0].name", "Arith_1")},
			want:  []string{`spec.datasets[0].name: Invalid value: "Arith_1"`},
		},
		{
			name:  "negative limit",
			edits: []edit{set("spec.datasets[0].limit", -1)},
			want:  []string{"spec.datasets[0].limit: Invalid value: -1"},
		},
		{
			name:  "URL without a host",
			edits: []edit{del("spec.datasets[0].source.inline"), set("spec.datasets[0].source.url", "data.jsonl")},
			want:  []string{`spec.datasets[0].source.url: Invalid value: "data.jsonl"`},
		},
		{
			name: "sha256 of 64 non-hex characters",
			edits: []edit{
				del("spec.datasets[0].source.inline"),
				set("spec.datasets[0].source.url", "https://example.com/d.jsonl"),
				set("spec.datasets[0].source.sha256", strings.Repeat("g", 64)),
			},
			want: []string{"spec.datasets[0].source.sha256: Invalid value"},
		},
		{
			name:  "pvc path escaping the volume",
			edits: []edit{del("spec.datasets[0].source.inline"), set("spec.datasets[0].source.pvc", obj{"claimName": "data", "path": "../etc/passwd"})},
			want:  []string{`spec.datasets[0].source.pvc.path: Invalid value: "../etc/passwd"`},
		},

		// Models.
		{
			name:     "negative token rates",
			edits:    []edit{set("spec.models[1].rateLimit", obj{"inputTokensPerMinute": -1, "outputTokensPerMinute": -2})},
			want:     []string{"spec.models[1].rateLimit.inputTokensPerMinute: Invalid value: -1", "spec.models[1].rateLimit.outputTokensPerMinute: Invalid value: -2"},
			problems: 2,
		},
		{
			name:  "agent env with a bad name",
			edits: []edit{appendTo("spec.models", agentModel()), set("spec.models[2].agent.env", []any{obj{"name": "1TOKEN", "value": "x"}})},
			want:  []string{`spec.models[2].agent.env[0].name: Invalid value: "1TOKEN"`},
		},

		// Scoring.
		{
			name:  "bad metric name",
			edits: []edit{set("spec.scoring[0].name", "exact match")},
			want:  []string{`spec.scoring[0].name: Invalid value: "exact match"`},
		},

		// Spec-wide settings.

		// Several problems at once: every one reported, one line each.
		{
			name: "three validation problems",
			edits: []edit{
				set("spec.models[0].provider", "gemini"),
				set("spec.scoring[0].type", "bleu"),
				set("spec.models[1].rateLimit", obj{"requestsPerMinute": -5}),
			},
			want: []string{
				`spec.models[0].provider: Unsupported value: "gemini"`,
				`spec.scoring[0].type: Unsupported value: "bleu"`,
				"spec.models[1].rateLimit.requestsPerMinute: Invalid value: -5",
			},
			problems: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.raw)
			if tt.edits != nil {
				data = manifest(t, tt.edits...)
			}
			ev, err := evalfile.Decode(fileName, data)
			if ev != nil {
				t.Errorf("Decode returned an Evaluation along with error %v", err)
			}
			fe := asEvalfileError(t, err)
			problems := tt.problems
			if problems == 0 {
				problems = 1
			}
			if len(fe.Problems) != problems {
				t.Errorf("got %d problems, want %d:\n%s", len(fe.Problems), problems, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%s\nmanifest:\n%s", w, err, data)
				}
			}
		})
	}
}

// TestDecodeOneLinePerProblem covers values that carry line breaks into a
// message: each problem must still be one line.
func TestDecodeOneLinePerProblem(t *testing.T) {
	tests := []struct {
		name  string
		edits []edit
		raw   string
		want  string
	}{
		{
			name:  "model name with a line break",
			edits: []edit{set("spec.models[0].name", "small\nmodel")},
			want:  `spec.models[0].name: Invalid value: "small\nmodel"`,
		},
		{
			name:  "unknown field with a line break",
			edits: []edit{set("spec.models[0].rate\nlimit", 1)},
			want:  `unknown field "spec.models[0].rate\nlimit"`,
		},
		{
			name: "several YAML problems",
			raw:  baseManifest + "  scoring: []\n  models: []\n",
			want: `line 23: key "scoring" already set in map`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.raw)
			if tt.edits != nil {
				data = manifest(t, tt.edits...)
			}
			_, err := evalfile.Decode(fileName, data)
			_ = asEvalfileError(t, err)
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error does not contain %q:\n%s", tt.want, err)
			}
		})
	}
}

func TestDecodeRegexWithLineBreakIsOneLine(t *testing.T) {
	data := manifest(t, appendTo("spec.scoring", obj{"type": "regex", "pattern": "(yes\nno"}))
	_, err := evalfile.Decode(fileName, data)
	fe := asEvalfileError(t, err)
	if len(fe.Problems) != 1 || !strings.Contains(err.Error(), "spec.scoring[2].pattern") {
		t.Errorf("want one problem naming spec.scoring[2].pattern, got:\n%s", err)
	}
}

func TestDecodeRejectsAnyStatus(t *testing.T) {
	for name, status := range map[string]obj{
		"progress":   {"progress": obj{"total": 1, "completed": 0, "errored": 0}},
		"score":      {"score": "0.5000"},
		"conditions": {"conditions": []any{obj{"type": "Complete", "status": "True", "reason": "Done", "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := evalfile.Decode(fileName, manifest(t, set("status", status)))
			_ = asEvalfileError(t, err)
			if !strings.Contains(err.Error(), "status") {
				t.Errorf("error does not name status: %v", err)
			}
		})
	}
}

// rawJSON compares RawExtensions by their decoded JSON, not their bytes.
var rawJSON = cmp.Transformer("rawJSON", func(r runtime.RawExtension) any {
	var v any
	if err := json.Unmarshal(r.Raw, &v); err != nil {
		return fmt.Sprintf("invalid JSON %q: %v", r.Raw, err)
	}
	return v
})

func ptr[T any](v T) *T { return &v }

// dur is a duration of the API's kind T.
func dur[T v1alpha1.Timeout | v1alpha1.Backoff | v1alpha1.ThrottleWait](d time.Duration) *T {
	return &T{Duration: d}
}

func TestDecodeBaseAppliesDefaults(t *testing.T) {
	ev, err := evalfile.Decode(fileName, []byte(baseManifest))
	if err != nil {
		t.Fatalf("Decode(base): %v", err)
	}
	want := &v1alpha1.Evaluation{
		TypeMeta:   metav1.TypeMeta{APIVersion: "proctor.dev/v1alpha1", Kind: "Evaluation"},
		ObjectMeta: metav1.ObjectMeta{Name: "smoke"},
		Spec: v1alpha1.EvaluationSpec{
			Datasets: []v1alpha1.Dataset{{
				Name: "arith",
				Source: v1alpha1.DatasetSource{Inline: []runtime.RawExtension{
					{Raw: []byte(`{"id":"q1","input":"2+2?","expected":"4"}`)},
				}},
			}},
			Models: []v1alpha1.Model{
				{Name: "small", Provider: "openai", Model: "gpt-4.1-mini", BaseURL: "https://api.openai.com/v1"},
				{Name: "grader", Provider: "anthropic", Model: "claude-sonnet-4", BaseURL: "https://api.anthropic.com"},
			},
			Prompt: &v1alpha1.Prompt{Template: "{{ .Input }}"},
			Scoring: []v1alpha1.Scorer{
				{Type: "exact_match"},
				{Type: "judge", Judge: &v1alpha1.Judge{Model: "grader"}},
			},
			Concurrency: ptr[int32](10),
			Parallelism: ptr[int32](4),
			Retry: &v1alpha1.RetryPolicy{
				MaxAttempts:     ptr[int32](3),
				InitialBackoff:  dur[v1alpha1.Backoff](time.Second),
				MaxBackoff:      dur[v1alpha1.Backoff](60 * time.Second),
				MaxThrottleWait: dur[v1alpha1.ThrottleWait](10 * time.Minute),
			},
			TimeoutPerSample: dur[v1alpha1.Timeout](2 * time.Minute),
			Cache:            &v1alpha1.Cache{},
		},
	}
	if diff := cmp.Diff(want, ev, rawJSON); diff != "" {
		t.Errorf("Decode(base) mismatch (-want +got):\n%s", diff)
	}
}

func TestDecodeDefaults(t *testing.T) {
	tests := []struct {
		name  string
		edits []edit
		// got extracts the part of the decoded Evaluation the test is about.
		got  func(ev *v1alpha1.Evaluation) any
		want any
	}{
		{
			name:  "apiKey without env takes the provider's variable",
			edits: []edit{set("spec.models[0].apiKey", obj{}), set("spec.models[1].apiKey", obj{})},
			got: func(ev *v1alpha1.Evaluation) any {
				return []*v1alpha1.APIKey{ev.Spec.Models[0].APIKey, ev.Spec.Models[1].APIKey}
			},
			want: []*v1alpha1.APIKey{{Env: "OPENAI_API_KEY"}, {Env: "ANTHROPIC_API_KEY"}},
		},
		{
			name:  "no apiKey stays unset",
			edits: nil,
			got:   func(ev *v1alpha1.Evaluation) any { return ev.Spec.Models[0].APIKey },
			want:  (*v1alpha1.APIKey)(nil),
		},
		{
			name:  "explicit apiKey env is kept",
			edits: []edit{set("spec.models[0].apiKey", obj{"env": "MY_KEY"})},
			got:   func(ev *v1alpha1.Evaluation) any { return ev.Spec.Models[0].APIKey },
			want:  &v1alpha1.APIKey{Env: "MY_KEY"},
		},
		{
			name:  "custom baseURL is kept",
			edits: []edit{set("spec.models[0].baseURL", "http://localhost:8080/v1")},
			got:   func(ev *v1alpha1.Evaluation) any { return ev.Spec.Models[0].BaseURL },
			want:  "http://localhost:8080/v1",
		},
		{
			name:  "agent gets no baseURL",
			edits: []edit{appendTo("spec.models", agentModel())},
			got:   func(ev *v1alpha1.Evaluation) any { return ev.Spec.Models[2].BaseURL },
			want:  "",
		},
		{
			name:  "tool_call checks arguments by default",
			edits: []edit{appendTo("spec.scoring", obj{"type": "tool_call"})},
			got:   func(ev *v1alpha1.Evaluation) any { return ev.Spec.Scoring[2].CheckArguments },
			want:  ptr(true),
		},
		{
			name:  "tool_call checkArguments false is kept",
			edits: []edit{appendTo("spec.scoring", obj{"type": "tool_call", "checkArguments": false})},
			got:   func(ev *v1alpha1.Evaluation) any { return ev.Spec.Scoring[2].CheckArguments },
			want:  ptr(false),
		},
		{
			name:  "other scorers get no checkArguments",
			edits: nil,
			got:   func(ev *v1alpha1.Evaluation) any { return ev.Spec.Scoring[0].CheckArguments },
			want:  (*bool)(nil),
		},
		{
			name:  "a prompt with only a system part gets the default template",
			edits: []edit{set("spec.prompt", obj{"system": "Answer briefly."})},
			got:   func(ev *v1alpha1.Evaluation) any { return ev.Spec.Prompt },
			want:  &v1alpha1.Prompt{System: "Answer briefly.", Template: "{{ .Input }}"},
		},
		{
			name:  "partial retry is completed",
			edits: []edit{set("spec.retry", obj{"maxAttempts": 5})},
			got:   func(ev *v1alpha1.Evaluation) any { return ev.Spec.Retry },
			want:  &v1alpha1.RetryPolicy{MaxAttempts: ptr[int32](5), InitialBackoff: dur[v1alpha1.Backoff](time.Second), MaxBackoff: dur[v1alpha1.Backoff](time.Minute), MaxThrottleWait: dur[v1alpha1.ThrottleWait](10 * time.Minute)},
		},
		{
			name:  "parameters keep their numbers",
			edits: []edit{set("spec.models[0].parameters", obj{"temperature": 0.7, "topP": 0.9})},
			got:   func(ev *v1alpha1.Evaluation) any { return ev.Spec.Models[0].Parameters },
			want:  &v1alpha1.Parameters{Temperature: ptr(v1alpha1.Number("0.7")), TopP: ptr(v1alpha1.Number("0.9"))},
		},
		{
			name:  "explicit values are not overridden",
			edits: []edit{set("spec.concurrency", 3), set("spec.timeoutPerSample", "45s"), set("spec.prompt", obj{"template": "Q: {{ .Input }}"})},
			got: func(ev *v1alpha1.Evaluation) any {
				return []any{*ev.Spec.Concurrency, ev.Spec.TimeoutPerSample.Duration, ev.Spec.Prompt.Template}
			},
			want: []any{int32(3), 45 * time.Second, "Q: {{ .Input }}"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := evalfile.Decode(fileName, manifest(t, tt.edits...))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(tt.want, tt.got(ev)); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeAccepts(t *testing.T) {
	tests := []struct {
		name string
		raw  string
	}{
		{"comment-only documents are ignored", "# header comment\n---\n" + baseManifest + "---\n# trailing notes\n---\n"},
		{"leading document separator", "---\n" + baseManifest},
		{"comments between fields", strings.Replace(baseManifest, "  models:\n", "  # the models\n  models:\n", 1)},
		{"all scorer types", baseManifest + `  - type: contains
  - type: regex
    pattern: "^4$"
  - type: numeric
    tolerance: 0.01
  - type: json_match
  - type: tool_call
`},
		{"every source kind", strings.Replace(baseManifest, "  models:\n", `  - name: from-file
    source: {file: data/q.csv}
  - name: from-url
    source:
      url: https://example.com/q.jsonl.gz
      sha256: `+strings.Repeat("aB", 32)+`
  - name: from-configmap
    source: {configMap: {name: data, key: q.jsonl}}
  - name: from-pvc
    source: {pvc: {claimName: data, path: sets/q.json}}
  models:
`, 1)},
		{"agent model", strings.Replace(baseManifest, "  scoring:\n", `  - name: coder
    provider: agent
    apiKey: {env: CODER_KEY}
    agent:
      command: [coder-cli, -p, "{{ .Prompt }}"]
      files: {"notes/task.md": "{{ .Input }}"}
      env: [{name: CODER_HOME, value: /tmp}, {name: GITHUB_TOKEN}]
      timeout: 10m
  scoring:
`, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := evalfile.Decode(fileName, []byte(tt.raw))
			if err != nil {
				t.Fatalf("Decode: %v\nmanifest:\n%s", err, tt.raw)
			}
			if ev.Name != "smoke" {
				t.Errorf("Name = %q, want smoke", ev.Name)
			}
		})
	}
}

// TestDecodeTemperature checks that a number keeps its value, and that a quoted
// one is refused, as the API server refuses it (the schema says type: number).
func TestDecodeTemperature(t *testing.T) {
	ev, err := evalfile.Decode(fileName, manifest(t, set("spec.models[0].parameters", obj{"temperature": 0.7})))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if got, err := ev.Spec.Models[0].Parameters.Temperature.Float64(); err != nil || got != 0.7 {
		t.Errorf("Float64() = %v, %v; want 0.7", got, err)
	}
	_, err = evalfile.Decode(fileName, manifest(t, set("spec.models[0].parameters", obj{"temperature": "0.7"})))
	if want := "spec.models[0].parameters.temperature in body must be of type number"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a quoted temperature: got %v, want an error containing %q", err, want)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(baseManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := evalfile.Load(good); err != nil {
		t.Errorf("Load(%s): %v", good, err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, manifest(t, set("spec.models[0].provider", "gemini")), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := evalfile.Load(bad)
	if err == nil || !strings.HasPrefix(err.Error(), bad+": spec.models[0].provider: Unsupported value") {
		t.Errorf("Load(bad) error = %v, want it to start with the path and name the field", err)
	}

	missing := filepath.Join(dir, "missing.yaml")
	_, err = evalfile.Load(missing)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) error = %v, want a not-exist error naming the file", err)
	}
}

// TestInlineValuesYAMLWouldChange: an unquoted id, input or expected answer
// that YAML reads as something other than the text written (no as false,
// 0.10 as 0.1, 007 as 7) is refused, naming its field and line and how to
// quote it; values YAML keeps as written, quoted ones, and fields that are
// not read as text pass.
func TestInlineValuesYAMLWouldChange(t *testing.T) {
	doc := func(items string) string {
		return `apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: s}
spec:
  datasets:
  - name: d
    fields: {expected: answer}
    source:
      inline:
` + items + `  models:
  - {name: m, provider: openai, baseURL: "http://localhost:1/v1", model: x}
`
	}
	for _, tc := range []struct {
		name, items string
		want        []string
	}{
		{"kept as written", `      - {id: a1, input: "Is it?", answer: 42, n: 3.0, flag: no}
      - {id: 12, input: true, answer: "no"}
      - id: a3
        input: |
          0.10
        answer: ~
`, nil},
		{"changed", `      - {id: 007, input: "x", answer: no}
      - {id: a2, input: 1e3, answer: 0.10}
`, []string{
			`spec.datasets[0].source.inline[0].id: line 10: the unquoted value 007 is read by YAML as the number 7, so the sample would hold "7", not "007": quote it ("007") to keep it as written`,
			`spec.datasets[0].source.inline[0].answer: line 10: the unquoted value no is read by YAML as the boolean false, so the sample would hold "false", not "no": quote it ("no") to keep it as written`,
			`spec.datasets[0].source.inline[1].input: line 11: the unquoted value 1e3 is read by YAML as the number 1000, so the sample would hold "1000", not "1e3": quote it ("1e3") to keep it as written`,
			`spec.datasets[0].source.inline[1].answer: line 11: the unquoted value 0.10 is read by YAML as the number 0.1, so the sample would hold "0.1", not "0.10": quote it ("0.10") to keep it as written`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := evalfile.DecodeFile("f.yaml", []byte(doc(tc.items)))
			var got []string
			var fe *evalfile.Error
			if errors.As(err, &fe) {
				got = fe.Problems
			} else if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}
