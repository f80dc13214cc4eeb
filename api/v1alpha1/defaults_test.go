package v1alpha1_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/dataset"
)

// TestDefaultsDocumented ties each default to what the field's documentation
// (kubectl explain) says, so that the two cannot drift.
func TestDefaultsDocumented(t *testing.T) {
	durations := []struct {
		path []string
		want time.Duration
	}{
		{[]string{"timeoutPerSample"}, v1alpha1.DefaultTimeoutPerSample},
		{[]string{"retry", "initialBackoff"}, v1alpha1.DefaultInitialBackoff},
		{[]string{"retry", "maxBackoff"}, v1alpha1.DefaultMaxBackoff},
		{[]string{"retry", "maxThrottleWait"}, v1alpha1.DefaultMaxThrottleWait},
		{[]string{"runner", "stallTimeout"}, v1alpha1.DefaultStallTimeout},
		{[]string{"models", "rateLimit", "burst"}, v1alpha1.DefaultBurst},
		{[]string{"hooks", "setup"}, v1alpha1.DefaultSetupTimeout},
		{[]string{"hooks", "beforeSample"}, v1alpha1.DefaultSampleHookTimeout},
		{[]string{"hooks", "afterSample"}, v1alpha1.DefaultSampleHookTimeout},
		{[]string{"hooks", "repairTimeout"}, v1alpha1.DefaultRepairTimeout},
	}
	defaultIs := regexp.MustCompile(`(?i)\bdefault:? ([0-9]+[a-z]+)\b`)
	for _, d := range durations {
		desc := testutil.CRDDescription(t, d.path...)
		m := defaultIs.FindStringSubmatch(desc)
		if m == nil {
			t.Errorf("spec.%s: the description says no default: %q", strings.Join(d.path, "."), desc)
			continue
		}
		if got, err := time.ParseDuration(m[1]); err != nil || got != d.want {
			t.Errorf("spec.%s: the description says default %s, the code %v", strings.Join(d.path, "."), m[1], d.want)
		}
	}
	texts := []struct {
		path []string
		want string
	}{
		{[]string{"concurrency"}, fmt.Sprintf("Default %d.", v1alpha1.DefaultConcurrency)},
		{[]string{"parallelism"}, fmt.Sprintf("Default %d.", v1alpha1.DefaultParallelism)},
		{[]string{"retry", "maxAttempts"}, fmt.Sprintf("Default %d.", v1alpha1.DefaultMaxAttempts)},
		{[]string{"prompt", "template"}, fmt.Sprintf("Default %q.", v1alpha1.DefaultPromptTemplate)},
		{[]string{"models", "parameters", "maxTokens"}, fmt.Sprintf("default %d there", v1alpha1.DefaultAnthropicMaxToken)},
		{[]string{"models", "baseURL"}, v1alpha1.DefaultOpenAIBaseURL},
		{[]string{"models", "baseURL"}, v1alpha1.DefaultAnthropicBaseURL},
		{[]string{"models", "endpointRef", "weight"}, fmt.Sprintf("Default %d.", v1alpha1.DefaultEndpointWeight)},
		{[]string{"models", "apiKey", "env"}, v1alpha1.DefaultOpenAIKeyEnv},
		{[]string{"models", "apiKey", "env"}, v1alpha1.DefaultAnthropicKeyEnv},
		// The dataset reader's mapping is the fields' documented defaults.
		{[]string{"datasets", "fields", "id"}, fmt.Sprintf("default %q", dataset.DefaultMapping.ID)},
		{[]string{"datasets", "fields", "input"}, fmt.Sprintf("default %q", dataset.DefaultMapping.Input)},
		{[]string{"datasets", "fields", "expected"}, fmt.Sprintf("default %q", dataset.DefaultMapping.Expected)},
		{[]string{"datasets", "fields", "messages"}, fmt.Sprintf("default %q", dataset.DefaultMapping.Messages)},
		{[]string{"datasets", "fields", "tools"}, fmt.Sprintf("default %q", dataset.DefaultMapping.Tools)},
	}
	for _, tc := range texts {
		if desc := testutil.CRDDescription(t, tc.path...); !strings.Contains(desc, tc.want) {
			t.Errorf("spec.%s: the description does not say %q: %q", strings.Join(tc.path, "."), tc.want, desc)
		}
	}
}
