package compile_test

import (
	"testing"

	"github.com/proctor-dev/proctor/internal/compile"
)

// TestCountDatasetsURLWithoutHTTPClient: the cluster's planner counts url
// datasets with an Env that sets no HTTPClient, as Build's callers may; it must
// download with the default client, not dereference nil.
func TestCountDatasetsURLWithoutHTTPClient(t *testing.T) {
	srv := newDataServer(t, map[string][]byte{"/q.jsonl": []byte(jsonlData)})
	for _, extra := range []string{"", "sha256: " + sha256Hex([]byte(jsonlData))} {
		env := newEnv(t, nil)
		env.HTTPClient = nil
		ev := decode(t, urlDataset(srv.URL+"/q.jsonl", extra)+localModel)
		totals, err := compile.CountDatasets(t.Context(), ev, env)
		if err != nil {
			t.Fatalf("CountDatasets (%q): %v", extra, err)
		}
		if totals["remote"] != 3 {
			t.Errorf("totals = %v, want remote: 3", totals)
		}
	}
}

// twoModels has a good model and an agent whose command names a field agent
// templates do not have (.Expected is the prompt template's, not the agent's).
const twoModels = inlineDataset + `models:
- {name: local, provider: openai, model: m, baseURL: "http://127.0.0.1:9/v1"}
- name: bot
  provider: agent
  agent: {command: [bot, "--want", "{{ .Expected }}"]}
` + exactMatch

// TestRunnerChecksOnlyItsModels: a runner pod compiles its own model and the
// judges; another model's bad template is that model's shards' problem, not its.
func TestRunnerChecksOnlyItsModels(t *testing.T) {
	env := newEnv(t, nil)
	env.Models = []string{"local"}
	if _, err := build(t, twoModels, env); err != nil {
		t.Fatalf("Build of model local failed on model bot's template: %v", err)
	}
	env.Models = []string{"bot"}
	_, err := build(t, twoModels, env)
	wantError(t, err, "spec.models[1].agent", "Expected")
}

// TestCheck: what a cluster checks at planning, without any API key: every
// model's templates against the data, and the totals.
func TestCheck(t *testing.T) {
	env := newEnv(t, nil)
	_, err := compile.Check(t.Context(), decode(t, twoModels), env)
	wantError(t, err, "spec.models[1].agent", "Expected")

	keyed := inlineDataset + `models:
- {name: gpt, provider: openai, model: gpt-4.1-mini, apiKey: {env: OPENAI_API_KEY, secretKeyRef: {name: s, key: k}}}
- name: coder
  provider: agent
  agent: {command: [coder, "{{ .Prompt }}"], env: [{name: GH_TOKEN}]}
cache: {enabled: true}
` + exactMatch
	env.CacheDir = ""
	totals, err := compile.Check(t.Context(), decode(t, keyed), env)
	if err != nil {
		t.Fatalf("Check without keys: %v", err)
	}
	if totals["qa"] != 2 {
		t.Errorf("totals = %v, want qa: 2", totals)
	}

	badPrompt := inlineDataset + localModel + "prompt: {template: \"{{ .Sample.nope }}\"}\n" + exactMatch
	_, err = compile.Check(t.Context(), decode(t, badPrompt), env)
	wantError(t, err, "spec.prompt.template", "nope")
}
