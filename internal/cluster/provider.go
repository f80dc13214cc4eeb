package cluster

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// ProviderSeen is what a provider's rate-limit headers last said of a key, as
// a runner saw them (ShardProgress.Provider, by caller).
type ProviderSeen struct {
	provider.RateLimits `json:",inline"`
	At                  metav1.Time `json:"at"`
}

// Latest is the newer of p and o.
func (p ProviderSeen) Latest(o ProviderSeen) ProviderSeen {
	if o.At.After(p.At.Time) {
		return o
	}
	return p
}

// The reasons of a LimitsMismatch.
const (
	// MismatchDeclared: the provider's limit is not the one declared.
	MismatchDeclared = "DeclaredLimitDiffers"
	// MismatchOutside: the provider counted more than Proctor sent through
	// the key: someone else uses it.
	MismatchOutside = "UsageOutsideProctor"
)

// ProviderFresh is how old an observation may be for its remaining counts to
// be compared with what Proctor sent in the last minute.
const ProviderFresh = 15 * time.Second

// LimitsMismatch compares a key's declared limits with what its provider's
// headers said (seen, at now), and what Proctor sent through the key over the
// last minute (used; nil when unknown). It returns "" when they agree, else
// the reason (MismatchDeclared first) and a message for people.
//
// A declared limit differing from the provider's either way is a mismatch:
// above it, calls draw 429s; below it, the key is not used as it could be.
// OpenAI's one token limit counts input and output tokens together; it is
// compared with inputTokensPerMinute when no output limit is declared.
// Someone else is using the key when the provider's bucket of the whole
// limit holds less than Proctor's own last minute can explain: a bucket
// refilled continuously holds at least the limit less what was sent over
// the last minute. Small differences (a tenth of the limit, at least 2) are
// left to timing.
func LimitsMismatch(declared ratelimit.Limits, seen ProviderSeen, used *Usage, now time.Time) (reason, message string) {
	return limitsMismatch(declared, seen, used, now, "Proctor sent through the key")
}

// LimitsMismatchOf is LimitsMismatch for a key that only one Evaluation
// declares (a model's own rateLimit): used is what its shards sent.
func LimitsMismatchOf(declared ratelimit.Limits, seen ProviderSeen, used *Usage, now time.Time) (reason, message string) {
	return limitsMismatch(declared, seen, used, now, "the Evaluation's shards sent")
}

func limitsMismatch(declared ratelimit.Limits, seen ProviderSeen, used *Usage, now time.Time, who string) (reason, message string) {
	type dim struct {
		name     string
		declared int64
		seen     provider.RateLimit
		used     int64
	}
	dims := []dim{
		{"requests", declared.RequestsPerMinute, seen.Requests, 0},
		{"input tokens", declared.InputTokensPerMinute, seen.InputTokens, 0},
		{"output tokens", declared.OutputTokensPerMinute, seen.OutputTokens, 0},
	}
	if used != nil {
		dims[0].used, dims[1].used, dims[2].used = used.Requests, used.InputTokens, used.OutputTokens
	}
	if seen.InputTokens.Limit == 0 && seen.Tokens.Limit > 0 && declared.OutputTokensPerMinute == 0 {
		dims[1].name, dims[1].seen = "tokens", seen.Tokens
		if used != nil {
			dims[1].used = used.InputTokens + used.OutputTokens
		}
	}
	var differ []string
	for _, d := range dims {
		if d.declared > 0 && d.seen.Limit > 0 && d.declared != d.seen.Limit {
			differ = append(differ, fmt.Sprintf("%d %s per minute where %d are declared", d.seen.Limit, d.name, d.declared))
		}
	}
	if len(differ) > 0 {
		return MismatchDeclared, "the provider's rate-limit headers say " + strings.Join(differ, ", and ")
	}
	if used == nil || now.Sub(seen.At.Time) > ProviderFresh {
		return "", ""
	}
	var outside []string
	for _, d := range dims {
		if d.seen.Limit <= 0 {
			continue
		}
		extra := d.seen.Limit - d.seen.Remaining - d.used
		if extra > max(2, d.seen.Limit/10) {
			outside = append(outside, d.name)
		}
	}
	if len(outside) > 0 {
		// No counts: they change with every call, and the message would
		// rewrite the status with them (status.provider has the provider's).
		return MismatchOutside, "the provider counted more " + strings.Join(outside, " and ") +
			" over the last minute than " + who + ": is the key used elsewhere?"
	}
	return "", ""
}
