package results

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCostJSON(t *testing.T) {
	d := func(v float64) *float64 { return &v }
	tests := []struct {
		name string
		cost Cost
		want string
	}{
		{"unknown, no judge", Cost{}, `{"model":null}`},
		{"known, no judge", Cost{Model: d(1.5)}, `{"model":1.5}`},
		{"judge unknown", Cost{Model: d(0.25), Judged: true}, `{"model":0.25,"judge":null}`},
		{"both known", Cost{Model: d(0), Judge: d(0.125), Judged: true}, `{"model":0,"judge":0.125}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.cost)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("marshalled %s, want %s", b, tt.want)
			}
			var back Cost
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.cost, back); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCostOfNothingFinished: a model without pricing whose run recorded
// nothing (stopped before its first sample) costs unknown, never 0; a
// priced one, 0.
func TestCostOfNothingFinished(t *testing.T) {
	for _, priced := range []bool{false, true} {
		agg := NewAggregate("m", "d", 40, []string{"acc"})
		agg.SetPriced(priced)
		got := agg.Summary().Cost.Model
		if priced != (got != nil) || (got != nil && *got != 0) {
			t.Errorf("priced %v: cost %v, want %v", priced, got, map[bool]string{false: "unknown (nil)", true: "0"}[priced])
		}
	}
}
