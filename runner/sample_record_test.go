package runner

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/spend"
)

func TestRecordStage(t *testing.T) {
	price, err := spend.NewPrice(spend.PerMillion{Input: "1", Output: "1"})
	if err != nil {
		t.Fatal(err)
	}
	dollars := ptrDollars
	charge := spend.Totals{Tokens: 15, Cost: price.Of(provider.Usage{InputTokens: 10, OutputTokens: 5}, false)}
	for _, tt := range []struct {
		name     string
		priced   bool
		res      callResult
		unpriced bool
		want     results.Record
		wantOK   bool
	}{
		{name: "an answer, redacted", priced: true,
			res: callResult{resp: &provider.Response{Text: "the key is sk-secret-123", Usage: provider.Usage{InputTokens: 10, OutputTokens: 5},
				ToolCalls: []provider.ToolCall{{Name: "f", Arguments: []byte(`{"k":"sk-secret-123"}`)}}},
				attempts: 2, latency: 1500 * time.Millisecond, key: "k1", charge: charge},
			want: results.Record{Output: "the key is [REDACTED]", Attempts: 2, LatencyMillis: 1500, CacheKey: "k1",
				Cost: dollars(charge.Cost), InputTokens: 10, OutputTokens: 5,
				ToolCalls: []provider.ToolCall{{Name: "f", Arguments: []byte(`{"k":"[REDACTED]"}`)}}},
			wantOK: true},
		{name: "an answer cut to size says how long it was",
			res:    callResult{resp: &provider.Response{Text: "abc", Truncated: true, FullBytes: 300000}, attempts: 1},
			want:   results.Record{Output: "abc", OutputTruncated: true, OutputBytes: 300000, Attempts: 1},
			wantOK: true},
		{name: "a failed call is the sample's error, redacted", priced: true,
			res:  callResult{err: errors.New("HTTP 500: bad key sk-secret-123"), attempts: 3, latency: time.Second},
			want: results.Record{Error: "HTTP 500: bad key [REDACTED]", ErrorKind: results.ErrorKindCall, Attempts: 3, LatencyMillis: 1000, Cost: dollars(0)}},
		{name: "an agent's call of a model nothing prices costs unknown", priced: true, unpriced: true,
			res:    callResult{resp: &provider.Response{Text: "x"}, attempts: 1, charge: charge},
			want:   results.Record{Output: "x", Attempts: 1},
			wantOK: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, m := stageEngine(t, &fakeProvider{fn: echo}, Options{}, func(p *Plan) { p.Secrets = []string{"sk-secret-123"} })
			if tt.priced {
				m.Price = price
			}
			var rec results.Record
			if ok := e.fromCall(&rec, m, tt.res, tt.unpriced, 0); ok != tt.wantOK {
				t.Errorf("answered %v, want %v", ok, tt.wantOK)
			}
			if diff := cmp.Diff(tt.want, rec); diff != "" {
				t.Errorf("record (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSettleAgent checks what an agent's session adds to its run's result:
// the proxied calls' usage and charge in place of what the agent reported,
// and no record when the agent failed for its endpoint's sake.
func TestSettleAgent(t *testing.T) {
	session := func(lost error) *agentSession {
		s := (&agentProxies{sessions: map[string]*agentSession{}}).open()
		s.calls, s.in, s.out, s.charge, s.lost = 3, 300, 60, spend.Totals{Tokens: 360, Cost: 7}, lost
		return s
	}
	reported := 0.5
	t.Run("the proxies' count replaces the agent's", func(t *testing.T) {
		res := callResult{resp: &provider.Response{Text: "done", Usage: provider.Usage{InputTokens: 1, OutputTokens: 1}, ReportedCost: &reported},
			charge: spend.Totals{Tokens: 2}}
		var rec results.Record
		if _, lost := settleAgent(session(nil), &res, &rec); lost != nil {
			t.Fatal(lost)
		}
		if res.resp.Usage != (provider.Usage{InputTokens: 300, OutputTokens: 60}) || res.resp.ReportedCost != nil ||
			res.charge != (spend.Totals{Tokens: 362, Cost: 7}) || rec.AgentCalls != 3 {
			t.Errorf("usage %+v, reported cost %v, charge %+v, agent calls %d; want the proxies' 300/60, none, 362 tokens and 7, 3",
				res.resp.Usage, res.resp.ReportedCost, res.charge, rec.AgentCalls)
		}
	})
	quota := &ThrottledOutError{Model: "m/ep"}
	t.Run("an agent that failed while its endpoint could not be called leaves no record", func(t *testing.T) {
		res := callResult{err: errors.New("exit status 1")}
		if _, lost := settleAgent(session(quota), &res, &results.Record{}); !errors.Is(lost, quota) {
			t.Errorf("lost %v, want the endpoint's quota", lost)
		}
	})
	t.Run("an agent that succeeded anyway keeps its record", func(t *testing.T) {
		res := callResult{resp: &provider.Response{Text: "done"}}
		if _, lost := settleAgent(session(quota), &res, &results.Record{}); lost != nil {
			t.Errorf("lost %v, want none", lost)
		}
	})
}
