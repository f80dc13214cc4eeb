package cluster

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

func TestLimitsMismatch(t *testing.T) {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	seen := func(limit, remaining int64, ago time.Duration) ProviderSeen {
		return ProviderSeen{RateLimits: provider.RateLimits{Requests: provider.RateLimit{Limit: limit, Remaining: remaining}}, At: metav1.NewTime(now.Add(-ago))}
	}
	for _, tc := range []struct {
		name     string
		declared ratelimit.Limits
		seen     ProviderSeen
		used     *Usage
		want     string
	}{
		{"agree", rpm(120), seen(120, 60, 0), &Usage{Requests: 60}, ""},
		{"declared above the provider's", rpm(600), seen(500, 400, 0), &Usage{Requests: 100}, MismatchDeclared},
		{"declared below the provider's", rpm(100), seen(500, 400, 0), &Usage{Requests: 100}, MismatchDeclared},
		{"someone else sends", rpm(120), seen(120, 20, 0), &Usage{Requests: 60}, MismatchOutside},
		{"timing's slack", rpm(120), seen(120, 50, 0), &Usage{Requests: 60}, ""},
		{"an old observation says nothing of now", rpm(120), seen(120, 0, time.Minute), &Usage{Requests: 60}, ""},
		{"usage unknown", rpm(120), seen(120, 0, 0), nil, ""},
		{"no limit declared", ratelimit.Limits{}, seen(120, 100, 0), &Usage{Requests: 20}, ""},
		{"OpenAI's one token limit", ratelimit.Limits{InputTokensPerMinute: 30000},
			ProviderSeen{RateLimits: provider.RateLimits{Tokens: provider.RateLimit{Limit: 40000, Remaining: 40000}}, At: metav1.NewTime(now)}, &Usage{}, MismatchDeclared},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg := LimitsMismatch(tc.declared, tc.seen, tc.used, now)
			if reason != tc.want {
				t.Errorf("reason %q (%s), want %q", reason, msg, tc.want)
			}
			if reason != "" && msg == "" {
				t.Error("no message")
			}
		})
	}
}
