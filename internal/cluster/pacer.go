package cluster

import (
	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// The pacer: a service of the manager's leader that tells runner pods when
// each call through a rate-limited key may go, so that the calls of every
// shard, Evaluation and namespace through one key together stay within the
// provider's token buckets, which a minute's share each cannot ensure (their
// bursts add up). See internal/pacer and docs/design.md.
const (
	// PacerAudience is the audience of the ServiceAccount tokens runner pods
	// present to the pacer: the API server does not accept them, and the
	// pacer accepts no other.
	PacerAudience = "proctor.dev/pacer"
	// PacerTokenDir is where a runner container finds that token (file
	// PacerTokenFile), projected by the kubelet and refreshed before it expires.
	PacerTokenDir  = "/var/run/secrets/proctor.dev/pacer"
	PacerTokenFile = "token"
	// EnvPacerURL gives runner pods the pacer's URL; unset, they pace on their
	// own (their shares of the budgets alone).
	EnvPacerURL = "PROCTOR_PACER_URL"
	// PacerReservePath and PacerSettlePath are the pacer's endpoints
	// (POST, JSON).
	PacerReservePath = "/pacer/v1/reserve"
	PacerSettlePath  = "/pacer/v1/settle"
)

// PaceRequest asks the pacer for a call's place.
type PaceRequest struct {
	Namespace  string `json:"namespace"`
	Evaluation string `json:"evaluation"`
	// Caller is the model called, or apiconv.AgentCallerName for an agent's calls
	// through an endpoint.
	Caller string         `json:"caller"`
	Cost   ratelimit.Cost `json:"cost"`
}

// PaceResponse is the pacer's answer: the call's place (ID) and how long from
// now it may go; or, when the place would be further ahead than the pacer
// grants, no place and how long to wait before asking again; or neither when
// the caller's key has no limit.
type PaceResponse struct {
	ID        string `json:"id,omitempty"`
	WaitNanos int64  `json:"waitNanos,omitempty"`
	// RetryNanos: no place was taken; ask again in this long.
	RetryNanos int64 `json:"retryNanos,omitempty"`
}

// PaceSettlement settles (or, Cancel, gives back) the places of calls.
type PaceSettlement struct {
	Calls []SettledCall `json:"calls"`
}

// SettledCall is what a call with a place actually cost, or that it was not
// made.
type SettledCall struct {
	ID     string         `json:"id"`
	Cancel bool           `json:"cancel,omitempty"`
	Cost   ratelimit.Cost `json:"cost"`
}

// RunnerServiceAccount is the ServiceAccount the runner pods of ev run as.
func RunnerServiceAccount(ev *v1alpha1.Evaluation) string {
	if r := ev.Spec.Runner; r != nil && r.ServiceAccountName != "" {
		return r.ServiceAccountName
	}
	return RunnerName(ev.Name)
}
