package v1alpha1

import (
	"encoding/json"
	"testing"
)

func TestNumberRoundTrip(t *testing.T) {
	cases := []struct {
		in, wantJSON string
		want         float64
		wantErr      bool
	}{
		{in: `0`, wantJSON: `0`, want: 0},
		{in: `0.7`, wantJSON: `0.7`, want: 0.7},
		{in: `1e-3`, wantJSON: `1e-3`, want: 0.001},
		{in: `"0.25"`, wantJSON: `0.25`, want: 0.25}, // quoted in YAML by habit
		{in: `"hot"`, wantErr: true},
		{in: `true`, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			var n Number
			err := json.Unmarshal([]byte(tc.in), &n)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("Unmarshal(%s) = %q, want an error", tc.in, n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f, _ := n.Float64(); f != tc.want {
				t.Errorf("Float64 = %v, want %v", f, tc.want)
			}
			b, err := json.Marshal(n)
			if err != nil || string(b) != tc.wantJSON {
				t.Errorf("Marshal = %s, %v; want %s", b, err, tc.wantJSON)
			}
		})
	}
}

func TestSetDefaultsKeepsWhatIsSet(t *testing.T) {
	spec := EvaluationSpec{
		Models:  []Model{{Name: "a", Provider: ProviderAnthropic, APIKey: &APIKey{}}, {Name: "b", Provider: ProviderOpenAI, BaseURL: "http://x/v1"}},
		Scoring: []Scorer{{Type: ScorerToolCall}},
		Prompt:  &Prompt{Template: "{{ .Sample.q }}"},
	}
	SetDefaults(&spec)
	switch {
	case *spec.Concurrency != DefaultConcurrency, *spec.Retry.MaxAttempts != DefaultMaxAttempts,
		spec.TimeoutPerSample.Duration != DefaultTimeoutPerSample:
		t.Errorf("defaults not applied: %+v", spec)
	case spec.Prompt.Template != "{{ .Sample.q }}":
		t.Errorf("template overwritten: %q", spec.Prompt.Template)
	case spec.Models[0].BaseURL != DefaultAnthropicBaseURL || spec.Models[0].APIKey.Env != DefaultAnthropicKeyEnv:
		t.Errorf("anthropic defaults: %+v", spec.Models[0])
	case spec.Models[1].BaseURL != "http://x/v1" || spec.Models[1].APIKey != nil:
		t.Errorf("openai model changed: %+v", spec.Models[1])
	case spec.Scoring[0].CheckArguments == nil || !*spec.Scoring[0].CheckArguments:
		t.Errorf("tool_call checkArguments default: %+v", spec.Scoring[0])
	}
}
