package provider

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseRateLimits(t *testing.T) {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   RateLimits
	}{{
		name: "OpenAI",
		header: map[string]string{"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-requests": "1s",
			"x-ratelimit-limit-tokens": "150000", "x-ratelimit-remaining-tokens": "149984", "x-ratelimit-reset-tokens": "6m0s"},
		want: RateLimits{Requests: RateLimit{60, 59, time.Second}, Tokens: RateLimit{150000, 149984, 6 * time.Minute}},
	}, {
		name: "Anthropic",
		header: map[string]string{"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "49",
			"anthropic-ratelimit-requests-reset":     "2026-11-01T12:00:02Z",
			"anthropic-ratelimit-input-tokens-limit": "30000", "anthropic-ratelimit-input-tokens-remaining": "29000",
			"anthropic-ratelimit-input-tokens-reset":  "2026-11-01T12:00:10Z",
			"anthropic-ratelimit-output-tokens-limit": "8000", "anthropic-ratelimit-output-tokens-remaining": "8000"},
		want: RateLimits{Requests: RateLimit{50, 49, 2 * time.Second}, InputTokens: RateLimit{30000, 29000, 10 * time.Second},
			OutputTokens: RateLimit{8000, 8000, 0}},
	}, {
		name:   "garbage says nothing",
		header: map[string]string{"x-ratelimit-limit-requests": "many", "x-ratelimit-remaining-requests": "-1", "anthropic-ratelimit-requests-limit": "0"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			if diff := cmp.Diff(tc.want, ParseRateLimits(h, now)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
