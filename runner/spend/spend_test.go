package spend

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/provider"
)

func TestParseDollars(t *testing.T) {
	tests := []struct {
		in      string
		want    Amount
		wantErr bool
	}{
		{in: "0", want: 0},
		{in: "2.50", want: 2_500_000_000_000},
		{in: "0.000000000001", want: 1},
		{in: "0.0000000000015", want: 2}, // half up
		{in: "0.0000000000014", want: 1},
		{in: "40000", want: 40_000 * Dollar},
		{in: "1e-3", want: 1_000_000_000},
		{in: "-1", wantErr: true},
		{in: "abc", wantErr: true},
		{in: "1e30", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseDollars(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseDollars(%q) = %d, %v; want %d (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestAmountString(t *testing.T) {
	tests := []struct {
		a    Amount
		want string
	}{
		{0, "$0.000000"},
		{2_500_000_000_000, "$2.500000"},
		{1_234_567_890_123, "$1.234568"},
		{499_999, "$0.000000499999"},
		{37_500, "$0.0000000375"}, // shown, not rounded to zero
		{-Dollar, "-$1.000000"},
	}
	for _, tt := range tests {
		if got := tt.a.String(); got != tt.want {
			t.Errorf("%d.String() = %q, want %q", tt.a, got, tt.want)
		}
	}
	if got := Amount(1_500_000).Decimal(); got != "0.000002" {
		t.Errorf("Decimal = %q", got)
	}
	if got := FromDollars(Amount(123_456_789_012).Dollars()); got != 123_456_789_012 {
		t.Errorf("FromDollars round trip = %d", got)
	}
}

func TestPrice(t *testing.T) {
	p, err := NewPrice(PerMillion{Input: "2.50", Output: "10", CachedInput: "1.25"})
	if err != nil {
		t.Fatal(err)
	}
	want := &Price{
		Input: 2_500_000, Output: 10_000_000, CachedInput: 1_250_000, CacheWrite: 2_500_000,
		BatchInput: 1_250_000, BatchOutput: 5_000_000, BatchCachedInput: 625_000, BatchCacheWrite: 1_250_000,
	}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("price (-want +got):\n%s", diff)
	}
	u := provider.Usage{InputTokens: 1000, CachedInputTokens: 400, OutputTokens: 100}
	sync := p.Of(u, false)
	if want := Amount(600*2_500_000 + 400*1_250_000 + 100*10_000_000); sync != want {
		t.Errorf("sync cost %d, want %d", sync, want)
	}
	if batch := p.Of(u, true); batch*2 != sync {
		t.Errorf("batch cost %d is not half of %d", batch, sync)
	}
	if got, want := p.Worst(1000, 100, false), Amount(1000*2_500_000+100*10_000_000); got != want {
		t.Errorf("worst %d, want %d", got, want)
	}
	explicit, err := NewPrice(PerMillion{Input: "3", Output: "15", CacheWrite: "3.75", BatchInput: "2", BatchOutput: "9"})
	if err != nil {
		t.Fatal(err)
	}
	if explicit.BatchCacheWrite != 2_500_000 || explicit.Worst(10, 0, false) != 10*3_750_000 {
		t.Errorf("explicit prices %+v", explicit)
	}
	if _, err := NewPrice(PerMillion{Input: "x", Output: "1"}); err == nil || err.Error() != `inputPerMillion: "x" is not a number` {
		t.Errorf("bad price error %v", err)
	}
}

func TestLedger(t *testing.T) {
	l := NewLedger(Limit{Cost: 100, Tokens: 1000})
	ctx := context.Background()
	a, err := l.Reserve(ctx, Totals{Cost: 60, Tokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	// 60 held: 50 more does not fit yet. It waits for the call in flight,
	// which settles for less, and then fits.
	got := make(chan error, 1)
	go func() {
		h, err := l.Reserve(ctx, Totals{Cost: 50, Tokens: 10})
		if err == nil {
			h.Settle(Totals{Cost: 50, Tokens: 10})
		}
		got <- err
	}()
	waitWaiting(t, l)
	if st := l.State(); st.Needed != (Totals{Cost: 50, Tokens: 10}) {
		t.Errorf("needed %+v while waiting", st.Needed)
	}
	a.Settle(Totals{Cost: 20, Tokens: 5})
	a.Settle(Totals{Cost: 20, Tokens: 5}) // once only
	if err := <-got; err != nil {
		t.Fatalf("after the settle: %v", err)
	}
	// 70 spent, nothing in flight: 40 can never fit, and exhausts the
	// ledger; then nothing starts, not even what would fit.
	var x *ExceededError
	if _, err := l.Reserve(ctx, Totals{Cost: 40}); !errors.As(err, &x) {
		t.Fatalf("past the limit: %v", err)
	}
	if _, err := l.Reserve(ctx, Totals{Cost: 1}); !errors.Is(err, x) {
		t.Fatalf("after exhaustion: %v", err)
	}
	if diff := cmp.Diff(State{Limit: Limit{Cost: 100, Tokens: 1000}, Spent: Totals{Cost: 70, Tokens: 15}, Exhausted: x}, l.State()); diff != "" {
		t.Errorf("state (-want +got):\n%s", diff)
	}
	l.SetLimit(Limit{Cost: 200, Tokens: 1000})
	if _, err := l.Reserve(ctx, Totals{Cost: 130, Tokens: 10}); err != nil {
		t.Errorf("after raising the limit: %v", err)
	}
	tokens := NewLedger(Limit{Tokens: 100})
	tokens.Add(Totals{Cost: 1 << 40, Tokens: 90})
	if _, err := tokens.Reserve(ctx, Totals{Tokens: 11}); err == nil {
		t.Error("a tokens-only budget let 101 tokens through")
	}
}

// waitWaiting waits until a call waits in l.
func waitWaiting(t *testing.T, l *Ledger) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !l.State().Waiting; {
		if time.Now().After(deadline) {
			t.Fatal("no call waits")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWaitingLedger(t *testing.T) {
	l := NewWaitingLedger(Limit{Cost: 10})
	got := make(chan error, 1)
	go func() {
		_, err := l.Reserve(context.Background(), Totals{Cost: 15})
		got <- err
	}()
	waitWaiting(t, l)
	if st := l.State(); st.Exhausted != nil || st.Needed.Cost != 15 {
		t.Errorf("a waiting ledger's state %+v", st)
	}
	l.SetLimit(Limit{Cost: 20})
	if err := <-got; err != nil {
		t.Fatalf("after the raise: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Reserve(ctx, Totals{Cost: 15}); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled wait: %v", err)
	}
	if st := l.State(); st.Waiting || st.Needed != (Totals{}) {
		t.Errorf("after the cancelled wait: %+v", st)
	}
}

func TestExceededError(t *testing.T) {
	err := &ExceededError{Limit: Limit{Cost: 5 * Dollar, Tokens: 1000}, Spent: Totals{Cost: 4 * Dollar, Tokens: 900}, Needed: Totals{Cost: 2 * Dollar, Tokens: 200}}
	want := "the budget is exhausted: spent $4.000000 of $5.000000 (maxCost), used 900 of 1000 tokens (maxTokens); the next call could cost up to $2.000000 and 200 tokens"
	if err.Error() != want {
		t.Errorf("got  %q\nwant %q", err.Error(), want)
	}
}

// TestZeroBudgetSaysZero: a budget of $0 is kept as the least amount (0
// means no limit), and said as $0.000000, not $0.000000000001.
func TestZeroBudgetSaysZero(t *testing.T) {
	l := Limit{Cost: Nothing}
	if got := l.CostText(); got != "$0.000000" {
		t.Errorf("CostText = %q, want $0.000000", got)
	}
	err := &ExceededError{Limit: l, Needed: Totals{Cost: Dollar / 100}}
	if want := "the budget is exhausted: spent $0.000000 of $0.000000 (maxCost); the next call could cost up to $0.010000"; err.Error() != want {
		t.Errorf("got  %q\nwant %q", err.Error(), want)
	}
	if _, err := NewLedger(l).Reserve(context.Background(), Totals{Cost: Dollar / 1_000_000}); err == nil {
		t.Error("a $0 budget let a call of a millionth of a dollar through")
	}
}
