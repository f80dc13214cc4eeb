package estimate

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/runner/spend"
)

func TestStatus(t *testing.T) {
	amount := func(dollars float64) *spend.Amount { a := spend.FromDollars(dollars); return &a }
	sync := Row{Model: "now", Dataset: "d", Calls: 10, InputTokens: 1000, Exact: true, OutputTokens: 500, OutputPerCall: 50, OutputFrom: "parameters.maxTokens",
		InputCost: amount(0.001), Cost: amount(0.003), BatchCost: amount(0.0015)}
	batch := sync
	batch.Model, batch.Batch = "nightly", true
	judge := Row{Model: "judge", Dataset: "d", Judge: "now", Calls: 10, InputTokens: 3000, Exact: true, OutputTokens: 100, OutputPerCall: 10, OutputFrom: "parameters.maxTokens",
		InputCost: amount(0.003), Cost: amount(0.004), BatchCost: amount(0.002)}
	unpriced := Row{Model: "local", Dataset: "d", Calls: 10, InputTokens: 900, OutputTokens: 4096 * 10, OutputPerCall: 4096, OutputFrom: "assumed (no parameters.maxTokens)"}
	agent := Row{Model: "coder", Dataset: "d", Calls: 10, Agent: true}

	tests := []struct {
		name        string
		rows        []Row
		want        *v1alpha1.EstimateStatus
		wantMessage []string
	}{
		{
			name: "a model called, the same in batches, a judge",
			rows: []Row{sync, batch, judge},
			want: &v1alpha1.EstimateStatus{Cost: "0.008500", InputTokens: 5000, OutputTokens: 1100, Results: []v1alpha1.EstimateResult{
				{Model: "now", Dataset: "d", Calls: 10, InputTokens: 1000, OutputTokens: 500, Cost: "0.003000", BatchCost: "0.001500"},
				{Model: "nightly", Dataset: "d", Calls: 10, InputTokens: 1000, OutputTokens: 500, Cost: "0.003000", BatchCost: "0.001500"},
				{Model: "judge", Dataset: "d", Judging: "now", Calls: 10, InputTokens: 3000, OutputTokens: 100, Cost: "0.004000", BatchCost: "0.002000"},
			}},
			wantMessage: []string{"No model was called", "from their length or bound", "now at 50 tokens (parameters.maxTokens)", "judge at 10 tokens"},
		},
		{
			name: "counted exactly",
			rows: []Row{sync},
			want: &v1alpha1.EstimateStatus{Cost: "0.003000", InputTokens: 1000, OutputTokens: 500, Exact: true, Results: []v1alpha1.EstimateResult{
				{Model: "now", Dataset: "d", Calls: 10, InputTokens: 1000, OutputTokens: 500, Cost: "0.003000", BatchCost: "0.001500"},
			}},
		},
		{
			name: "a model without pricing, and an agent",
			rows: []Row{sync, unpriced, agent},
			want: &v1alpha1.EstimateStatus{Cost: v1alpha1.CostUnknown, InputTokens: 1900, OutputTokens: 500 + 40960, Results: []v1alpha1.EstimateResult{
				{Model: "now", Dataset: "d", Calls: 10, InputTokens: 1000, OutputTokens: 500, Cost: "0.003000", BatchCost: "0.001500"},
				{Model: "local", Dataset: "d", Calls: 10, InputTokens: 900, OutputTokens: 40960, Cost: v1alpha1.CostUnknown, BatchCost: v1alpha1.CostUnknown},
				{Model: "coder", Dataset: "d", Calls: 10, Cost: v1alpha1.CostUnknown, BatchCost: v1alpha1.CostUnknown},
			}},
			wantMessage: []string{"agents are not estimated", "local at 4096 tokens (assumed (no parameters.maxTokens))"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Status(tc.rows)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(v1alpha1.EstimateStatus{}, "Message")); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			for _, m := range tc.wantMessage {
				if !strings.Contains(got.Message, m) {
					t.Errorf("message %q does not say %q", got.Message, m)
				}
			}
		})
	}
}

func TestStatusBoundsItsSize(t *testing.T) {
	rows := make([]Row, 300)
	for i := range rows {
		rows[i] = Row{Model: "m", Dataset: "d", Calls: 1, InputTokens: 10, Exact: true, OutputTokens: 1, OutputPerCall: 1, OutputFrom: strings.Repeat("x", 100)}
	}
	st := Status(rows)
	if len(st.Results) != maxStatusRows || st.InputTokens != 3000 || !strings.Contains(st.Message, "the first 256 of 300 rows") {
		t.Errorf("%d results, %d input tokens, message %q", len(st.Results), st.InputTokens, st.Message)
	}
	long := FailedStatus(errors.New(strings.Repeat("é", 3000)))
	if len(long.Message) > 4096 || long.Cost != v1alpha1.CostUnknown || !strings.HasPrefix(long.Message, "No estimate: ") {
		t.Errorf("failed status: cost %q, message of %d bytes", long.Cost, len(long.Message))
	}
}
