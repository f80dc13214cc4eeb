package local_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestModelsSharingAnEndpointStayWithinItsLimit: two models of one file call
// through one ModelEndpoint (the same documents a cluster holds) whose limit is
// the server's: together they never meet a 429, each is counted once per
// sample, and the key comes from the endpoint's apiKey.env.
func TestModelsSharingAnEndpointStayWithinItsLimit(t *testing.T) {
	t.Parallel()
	const n, rpm = 20, 600
	srv, w, endpoint := teamKey(t, n, rpm)
	w.write("evaluation.yaml", endpoint+evaluation("shared", `  concurrency: 10
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: first
    endpointRef: {name: team-key, weight: 2}
    model: fake-model
  - name: second
    endpointRef: {name: team-key}
    model: fake-model
  scoring:
  - type: exact_match
`))
	res := w.run()
	if res.Code != 0 {
		t.Fatalf("want exit 0\n%s", res)
	}
	st := srv.Stats()
	if st.RateLimited != 0 {
		t.Errorf("server answered %d requests with 429 although the endpoint declares its limit (stats %+v)", st.RateLimited, st)
	}
	if st.Requests != 2*n {
		t.Errorf("server received %d requests, want exactly %d", st.Requests, 2*n)
	}
	recs, _ := readRecords(t, w.out)
	if len(recs) != 2*n {
		t.Fatalf("%d records, want %d", len(recs), 2*n)
	}
	for _, r := range recs {
		if r.Error != "" || r.Attempts != 1 {
			t.Errorf("%s/%s: want one clean attempt, got %+v", r.Model, r.ID, r)
		}
	}
}

// TestAgentCallsShareTheEndpointLocally: an agent making three calls per
// sample through its endpoint's proxy, and a model calling through the same
// endpoint, stay together within its limit (the server's): no 429, every call
// made once, each agent call counted in its sample's record.
func TestAgentCallsShareTheEndpointLocally(t *testing.T) {
	t.Parallel()
	const n, rpm = 12, 600
	srv, w, endpoint := teamKey(t, n, rpm)
	// The agent asks for fake-agent; plain calls fake-model.
	endpoint = strings.Replace(endpoint, "---\n", `  pricing:
  - {model: fake-agent, pricing: {inputPerMillion: 2, outputPerMillion: 8}}
  - {model: fake-model, pricing: {inputPerMillion: 1, outputPerMillion: 4}}
---
`, 1)
	w.write("evaluation.yaml", endpoint+evaluation("agents", fmt.Sprintf(`  concurrency: 4
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: bot
    provider: agent
    agent:
      command: [%q, -calls, "3", "{{ .Prompt }}"]
      endpoints:
      - {endpointRef: {name: team-key}, baseURLEnv: OPENAI_BASE_URL, apiKeyEnv: OPENAI_API_KEY}
  - name: plain
    endpointRef: {name: team-key}
    model: fake-model
  scoring:
  - type: exact_match
`, fakeAgentBin)))
	res := w.run()
	if res.Code != 0 {
		t.Fatalf("want exit 0\n%s", res)
	}
	st := srv.Stats()
	if st.RateLimited != 0 || st.Requests != 4*n {
		t.Errorf("server stats %+v: want %d requests and no 429", st, 4*n)
	}
	recs, _ := readRecords(t, w.out)
	if len(recs) != 2*n {
		t.Fatalf("%d records, want %d", len(recs), 2*n)
	}
	for _, r := range recs {
		want := int64(0)
		if r.Model == "bot" {
			want = 3
		}
		if r.Error != "" || r.AgentCalls != want || r.InputTokens == 0 {
			t.Errorf("%s/%s: error %q, agentCalls %d, inputTokens %d; want no error, %d calls and tokens", r.Model, r.ID, r.Error, r.AgentCalls, r.InputTokens, want)
		}
		// Each call at the endpoint's price of the model it asked for.
		in, out := 1.0, 4.0
		if r.Model == "bot" {
			in, out = 2, 8
		}
		if wantCost := (float64(r.InputTokens)*in + float64(r.OutputTokens)*out) / 1e6; r.Cost == nil || math.Abs(*r.Cost-wantCost) > 1e-12 {
			t.Errorf("%s/%s: cost %v, want $%g (%d input and %d output tokens)", r.Model, r.ID, r.Cost, wantCost, r.InputTokens, r.OutputTokens)
		}
		if r.Model != "bot" {
			continue
		}
		// The calls one by one: together, the record's tokens and cost.
		var tokIn, tokOut int64
		var cost float64
		for _, c := range r.ProxiedCalls {
			if c.Endpoint != "team-key" || c.Model != "fake-agent" || c.Path != "/v1/chat/completions" || c.Status != 200 || c.Attempts != 1 || c.Cost == nil || c.StartedAt.IsZero() {
				t.Errorf("%s/%s: a proxied call %+v", r.Model, r.ID, c)
				continue
			}
			tokIn, tokOut, cost = tokIn+c.InputTokens, tokOut+c.OutputTokens, cost+*c.Cost
		}
		if len(r.ProxiedCalls) != 3 || tokIn != r.InputTokens || tokOut != r.OutputTokens || r.Cost == nil || math.Abs(cost-*r.Cost) > 1e-12 {
			t.Errorf("%s/%s: %d proxied calls of %d+%d tokens and $%g; the record: %d+%d tokens, $%v",
				r.Model, r.ID, len(r.ProxiedCalls), tokIn, tokOut, cost, r.InputTokens, r.OutputTokens, r.Cost)
		}
	}
}

// teamKey is a fake server limited to rpm that wants the key TEAM_KEY holds, a
// workspace with n questions in qs.jsonl, and the document of ModelEndpoint
// team-key declaring that server, key and limit.
func teamKey(t *testing.T, n, rpm int) (*fake, *workspace, string) {
	srv := newFake(t, fakellm.Config{RequestsPerMinute: rpm, LimitMode: fakellm.LimitBucket, Burst: 3, APIKey: "sk-team-key-123456"})
	w := newWorkspace(t)
	w.env["TEAM_KEY"] = "sk-team-key-123456"
	w.write("qs.jsonl", arithmeticJSONL("q", n))
	return srv, w, fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: ModelEndpoint
metadata:
  name: team-key
spec:
  provider: openai
  baseURL: %s
  apiKey: {env: TEAM_KEY}
  limits: {requestsPerMinute: %d}
---
`, srv.OpenAIURL(), rpm)
}
