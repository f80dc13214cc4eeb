package estimate

import (
	"fmt"
	"strings"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/runner/spend"
)

// maxStatusRows bounds status.estimate.results (the CRD's MaxItems), so
// that the estimate fits in an annotation of the plan ConfigMap.
const maxStatusRows = 256

// Status is an estimate as status.estimate shows it.
func Status(rows []Row) *v1alpha1.EstimateStatus {
	t := Sum(rows)
	st := &v1alpha1.EstimateStatus{InputTokens: t.InputTokens, OutputTokens: t.OutputTokens, Exact: t.Exact, Cost: v1alpha1.CostUnknown}
	if !t.Unknown {
		st.Cost = t.RunCost.Decimal()
	}
	amount := func(a *spend.Amount) string {
		if a == nil {
			return v1alpha1.CostUnknown
		}
		return a.Decimal()
	}
	bounds := map[string]bool{}
	var order []string
	for _, r := range rows {
		if len(st.Results) < maxStatusRows {
			res := v1alpha1.EstimateResult{Model: r.Model, Dataset: r.Dataset, Judging: r.Judge, Calls: int64(r.Calls)}
			if r.Agent {
				res.Cost, res.BatchCost = v1alpha1.CostUnknown, v1alpha1.CostUnknown
			} else {
				res.InputTokens, res.OutputTokens = r.InputTokens, r.OutputTokens
				res.Cost, res.BatchCost = amount(r.Cost), amount(r.BatchCost)
			}
			st.Results = append(st.Results, res)
		}
		if b := fmt.Sprintf("%s at %d tokens (%s)", r.Model, r.OutputPerCall, r.OutputFrom); !r.Agent && !bounds[b] {
			bounds[b] = true
			order = append(order, b)
		}
	}
	notes := []string{"No model was called: input tokens were counted by the providers' token counting endpoints"}
	if !t.Exact {
		notes[0] += " (where a server has none, and for the answers a judge sees, from their length or bound)"
	}
	if len(order) > 0 {
		notes = append(notes, "answers bounded: "+strings.Join(order, ", "))
	}
	if t.Agents {
		notes = append(notes, "agents are not estimated (what they call depends on what they do)")
	}
	if len(rows) > maxStatusRows {
		notes = append(notes, fmt.Sprintf("results show the first %d of %d rows (the totals count them all)", maxStatusRows, len(rows)))
	}
	st.Message = clip(strings.Join(notes, "; ") + ".")
	return st
}

// FailedStatus is the status.estimate of an estimate that could not be made.
func FailedStatus(err error) *v1alpha1.EstimateStatus {
	return &v1alpha1.EstimateStatus{Cost: v1alpha1.CostUnknown, Message: clip("No estimate: " + err.Error())}
}

// clip keeps a message within status.estimate.message's 4096 bytes.
func clip(msg string) string {
	if len(msg) <= 4096 {
		return msg
	}
	return strings.ToValidUTF8(msg[:4093], "") + "..."
}
