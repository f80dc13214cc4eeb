package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/spend"
)

func TestSendStage(t *testing.T) {
	refused := &provider.HTTPError{StatusCode: 429}
	for _, tt := range []struct {
		name      string
		fn        func(context.Context, *provider.Request, int64) (*provider.Response, error)
		wantErr   string
		wantUsage Usage
		wantSpent spend.Totals
	}{
		{name: "an answer counts its tokens", fn: echo,
			wantUsage: Usage{Requests: 1, InputTokens: 10, OutputTokens: 2}, wantSpent: spend.Totals{Tokens: 12}},
		{name: "a 429 counts as refused, at no cost",
			fn:      func(context.Context, *provider.Request, int64) (*provider.Response, error) { return nil, refused },
			wantErr: "HTTP 429", wantUsage: Usage{Requests: 1, Throttled: 1}},
		{name: "no answer and no error is an error, charged at the worst",
			fn:      func(context.Context, *provider.Request, int64) (*provider.Response, error) { return nil, nil },
			wantErr: "provider returned no response", wantUsage: Usage{Requests: 1}, wantSpent: spend.Totals{Tokens: 100}},
		{name: "the call's timeout bounds it",
			fn: func(ctx context.Context, _ *provider.Request, _ int64) (*provider.Response, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
			wantErr: "context deadline exceeded", wantUsage: Usage{Requests: 1}, wantSpent: spend.Totals{Tokens: 100}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := spend.NewLedger(spend.Limit{Tokens: 1000})
			e, m := stageEngine(t, &fakeProvider{fn: tt.fn}, Options{Clock: clockwork.NewRealClock(), Ledger: l}, nil)
			worst := spend.Totals{Tokens: 100}
			hold, err := e.reserveBudget(context.Background(), m, worst)
			if err != nil {
				t.Fatal(err)
			}
			resp, _, charge, err := e.send(context.Background(), m, &provider.Request{Prompt: "q"}, nil, worst, hold, 50*time.Millisecond, 1)
			switch {
			case tt.wantErr == "" && (err != nil || resp == nil):
				t.Fatalf("got %v, %v; want an answer", resp, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
			if got := m.usage.lastMinute(); got != tt.wantUsage {
				t.Errorf("usage %+v, want %+v", got, tt.wantUsage)
			}
			if st := l.State(); charge != tt.wantSpent || st.Spent != tt.wantSpent || st.Reserved != (spend.Totals{}) {
				t.Errorf("charged %+v; the ledger spent %+v and holds %+v; want %+v spent and nothing held", charge, st.Spent, st.Reserved, tt.wantSpent)
			}
		})
	}
}
