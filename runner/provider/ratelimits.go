package provider

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RateLimits are what a provider's rate-limit headers said of the key's limits
// on one answer: OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens}
// and Anthropic's anthropic-ratelimit-{requests,input-tokens,output-tokens}-
// {limit,remaining,reset}. Each counts a bucket of the whole per-minute limit:
// what remains of it, and how long until it is whole again.
type RateLimits struct {
	Requests     RateLimit `json:"requests,omitzero"`
	InputTokens  RateLimit `json:"inputTokens,omitzero"`
	OutputTokens RateLimit `json:"outputTokens,omitzero"`
	// Tokens is OpenAI's one token limit, of input and output together.
	Tokens RateLimit `json:"tokens,omitzero"`
}

// RateLimit is one limit's state; Limit 0 means the headers said nothing of it.
type RateLimit struct {
	Limit     int64 `json:"limit,omitempty"`
	Remaining int64 `json:"remaining,omitempty"`
	// Reset is how long until Remaining is back to Limit.
	Reset time.Duration `json:"reset,omitempty"`
}

// IsZero reports whether the headers said nothing.
func (r RateLimits) IsZero() bool { return r == RateLimits{} }

// ParseRateLimits reads the rate-limit headers of an answer received at now
// (Anthropic's reset times are on the provider's clock, which may differ from
// ours: a reset is never negative). Values that do not parse count as unsaid.
func ParseRateLimits(h http.Header, now time.Time) RateLimits {
	var r RateLimits
	openai := func(name string) RateLimit {
		l := RateLimit{Limit: headerInt(h, "X-Ratelimit-Limit-"+name), Remaining: headerInt(h, "X-Ratelimit-Remaining-"+name)}
		if d, err := time.ParseDuration(strings.TrimSpace(h.Get("X-Ratelimit-Reset-" + name))); err == nil && d > 0 {
			l.Reset = d
		}
		return known(l)
	}
	anthropic := func(name string) RateLimit {
		l := RateLimit{Limit: headerInt(h, "Anthropic-Ratelimit-"+name+"-Limit"), Remaining: headerInt(h, "Anthropic-Ratelimit-"+name+"-Remaining")}
		if t, err := time.Parse(time.RFC3339, strings.TrimSpace(h.Get("Anthropic-Ratelimit-"+name+"-Reset"))); err == nil {
			l.Reset = max(t.Sub(now), 0)
		}
		return known(l)
	}
	if r.Requests = openai("Requests"); r.Requests.Limit == 0 {
		r.Requests = anthropic("Requests")
	}
	r.Tokens = openai("Tokens")
	r.InputTokens = anthropic("Input-Tokens")
	r.OutputTokens = anthropic("Output-Tokens")
	return r
}

// known is l if it says a limit, else nothing.
func known(l RateLimit) RateLimit {
	if l.Limit <= 0 || l.Remaining < 0 {
		return RateLimit{}
	}
	return l
}

func headerInt(h http.Header, name string) int64 {
	v, err := strconv.ParseInt(strings.TrimSpace(h.Get(name)), 10, 64)
	if err != nil {
		return -1
	}
	return v
}

// RateLimitObserver receives the rate-limit headers of every answer to a
// request made with a context carrying it (WithRateLimitObserver).
type RateLimitObserver func(RateLimits)

type observerKey struct{}

// WithRateLimitObserver makes the requests sent with ctx report their
// answers' rate-limit headers to o.
func WithRateLimitObserver(ctx context.Context, o RateLimitObserver) context.Context {
	return context.WithValue(ctx, observerKey{}, o)
}

// ObserveRateLimits reports h, the headers of an answer to a request sent with
// ctx, to ctx's observer if it has one and they say anything.
func ObserveRateLimits(ctx context.Context, h http.Header) {
	o, ok := ctx.Value(observerKey{}).(RateLimitObserver)
	if !ok || o == nil {
		return
	}
	if r := ParseRateLimits(h, time.Now()); !r.IsZero() {
		o(r)
	}
}
