package cluster

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/spend"
)

func TestDivideSpend(t *testing.T) {
	cost := func(c int64) spend.Totals { return spend.Totals{Cost: spend.Amount(c)} }
	limit := spend.Limit{Cost: 1000}
	tests := []struct {
		name          string
		prev          *SpendBudget
		limit         spend.Limit
		shards        []SpendShard
		want          map[string]spend.Totals
		wantChanged   bool
		wantExhausted bool
	}{
		{
			name:  "first division: a chunk each, half kept back",
			limit: limit,
			shards: []SpendShard{
				{Key: "m/0", Running: true}, {Key: "m/1", Running: true},
				{Key: "m/2"}, // not started: nothing
			},
			want:        map[string]spend.Totals{"m/0": cost(250), "m/1": cost(250)},
			wantChanged: true,
		},
		{
			name:  "headroom above half a chunk: left alone",
			prev:  &SpendBudget{Limit: limit, Allowances: map[string]spend.Totals{"m/0": cost(250), "m/1": cost(250)}},
			limit: limit,
			shards: []SpendShard{
				{Key: "m/0", Running: true, Spent: cost(50)},
				{Key: "m/1", Running: true, Spent: cost(40), Reserved: cost(10)},
			},
			want: map[string]spend.Totals{"m/0": cost(250), "m/1": cost(250)},
		},
		{
			name:  "low headroom topped up to a chunk of what is unspent",
			prev:  &SpendBudget{Limit: limit, Allowances: map[string]spend.Totals{"m/0": cost(250), "m/1": cost(250)}},
			limit: limit,
			shards: []SpendShard{
				{Key: "m/0", Running: true, Spent: cost(200), Reserved: cost(20)},
				{Key: "m/1", Running: true, Spent: cost(100)},
			},
			// Unspent 700, chunk 175: m/0's headroom 30 is raised to 175.
			want:        map[string]spend.Totals{"m/0": cost(395), "m/1": cost(250)},
			wantChanged: true,
		},
		{
			name:  "a finished shard gives back what it did not spend",
			prev:  &SpendBudget{Limit: limit, Allowances: map[string]spend.Totals{"m/0": cost(250), "m/1": cost(250)}},
			limit: limit,
			shards: []SpendShard{
				{Key: "m/0", Finished: true, Spent: cost(120)},
				{Key: "m/1", Running: true, Spent: cost(240), Blocked: true, Needed: cost(30)},
			},
			// Unspent 640, chunk 320: m/1 gets 320 of headroom.
			want:        map[string]spend.Totals{"m/0": cost(120), "m/1": cost(560)},
			wantChanged: true,
		},
		{
			name:  "exhausted: every running shard waits for more than is left",
			prev:  &SpendBudget{Limit: limit, Allowances: map[string]spend.Totals{"m/0": cost(495), "m/1": cost(495)}},
			limit: limit,
			shards: []SpendShard{
				{Key: "m/0", Running: true, Spent: cost(490), Blocked: true, Needed: cost(30)},
				{Key: "m/1", Running: true, Spent: cost(480), Blocked: true, Needed: cost(30)},
			},
			want:          map[string]spend.Totals{"m/0": cost(505), "m/1": cost(495)},
			wantChanged:   true,
			wantExhausted: true,
		},
		{
			name:  "not exhausted while a blocked shard has calls in flight",
			prev:  &SpendBudget{Limit: limit, Allowances: map[string]spend.Totals{"m/0": cost(500), "m/1": cost(500)}},
			limit: limit,
			shards: []SpendShard{
				{Key: "m/0", Running: true, Spent: cost(450), Reserved: cost(40), Blocked: true, Needed: cost(30)},
				{Key: "m/1", Running: true, Spent: cost(500), Blocked: true, Needed: cost(30)},
			},
			want: map[string]spend.Totals{"m/0": cost(500), "m/1": cost(500)},
		},
		{
			name:  "a raised limit lets blocked shards go on",
			prev:  &SpendBudget{Limit: limit, Allowances: map[string]spend.Totals{"m/0": cost(500), "m/1": cost(500)}},
			limit: spend.Limit{Cost: 2000},
			shards: []SpendShard{
				{Key: "m/0", Running: true, Spent: cost(495), Blocked: true, Needed: cost(30)},
				{Key: "m/1", Running: true, Spent: cost(490), Blocked: true, Needed: cost(30)},
			},
			// Unspent 1015, chunk 253.
			want:        map[string]spend.Totals{"m/0": cost(748), "m/1": cost(743)},
			wantChanged: true,
		},
		{
			name:  "tokens and money apart",
			limit: spend.Limit{Cost: 1000, Tokens: 100},
			shards: []SpendShard{
				{Key: "m/0", Running: true, Blocked: true, Needed: spend.Totals{Cost: 10, Tokens: 60}},
			},
			want:          map[string]spend.Totals{"m/0": {Cost: 500, Tokens: 60}},
			wantChanged:   true,
			wantExhausted: false,
		},
		{
			name:  "more spent than allowed (a lost record) counts in full",
			prev:  &SpendBudget{Limit: limit, Allowances: map[string]spend.Totals{"m/0": cost(100), "m/1": cost(850)}},
			limit: limit,
			shards: []SpendShard{
				{Key: "m/0", Running: true, Spent: cost(130)},
				{Key: "m/1", Finished: true, Spent: cost(850)},
			},
			// m/0 counts at 130; of the 20 left, a chunk (10) is its headroom.
			want:        map[string]spend.Totals{"m/0": cost(140), "m/1": cost(850)},
			wantChanged: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, changed, exhausted := DivideSpend(tt.prev, tt.limit, tt.shards)
			if diff := cmp.Diff(tt.want, next.Allowances); diff != "" {
				t.Errorf("allowances (-want +got):\n%s", diff)
			}
			if changed != tt.wantChanged || exhausted != tt.wantExhausted {
				t.Errorf("changed %v exhausted %v, want %v %v", changed, exhausted, tt.wantChanged, tt.wantExhausted)
			}
			var sum spend.Amount
			for _, a := range next.Allowances {
				sum += a.Cost
			}
			if sum > tt.limit.Cost {
				t.Errorf("allowances add up to %d, over the limit %d", sum, tt.limit.Cost)
			}
		})
	}
}
