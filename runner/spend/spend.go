// Package spend prices model calls and keeps a run within its budget.
//
// Money is counted in picodollars (1e-12 US dollars) as integers: prices of
// a millionth of a dollar per million tokens are whole picodollars per token,
// so costs add up exactly, and a batch price of half the list price is
// exactly half, however many calls a run makes.
package spend

import (
	"fmt"
	"math"
	"math/big"
	"strings"

	"github.com/proctor-dev/proctor/runner/provider"
)

// Amount is money in picodollars.
type Amount int64

// Dollar is one US dollar.
const Dollar Amount = 1_000_000_000_000

// ParseDollars reads a decimal number of dollars (such as "2.50"), rounded
// to the picodollar.
func ParseDollars(s string) (Amount, error) {
	r, ok := new(big.Rat).SetString(strings.TrimSpace(s))
	if !ok {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if r.Sign() < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(int64(Dollar)))
	f, _ := r.Float64()
	if f > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	// Round half up.
	n := new(big.Int).Quo(new(big.Int).Add(new(big.Int).Mul(r.Num(), big.NewInt(2)), r.Denom()), new(big.Int).Mul(r.Denom(), big.NewInt(2)))
	return Amount(n.Int64()), nil
}

// FromDollars converts a float number of dollars, as records hold it, back to
// picodollars. It is exact for the amounts a record holds (under $9,000).
func FromDollars(d float64) Amount { return Amount(math.Round(d * float64(Dollar))) }

// Dollars is the amount in dollars, as records and summaries hold it.
func (a Amount) Dollars() float64 { return float64(a) / float64(Dollar) }

// String formats the amount in dollars rounded to six decimals
// ("$1.234568"), or with every digit when that would show a nonzero amount
// as zero.
func (a Amount) String() string {
	sign := ""
	if a < 0 {
		sign, a = "-", -a
	}
	const micro = Dollar / 1_000_000
	if r := (a + micro/2) / micro; r > 0 || a == 0 {
		return fmt.Sprintf("%s$%d.%06d", sign, r/1_000_000, r%1_000_000)
	}
	return sign + "$0." + strings.TrimRight(fmt.Sprintf("%012d", int64(a)), "0")
}

// Decimal formats the amount as a plain decimal number of dollars with six
// decimals (more for a tiny nonzero amount), as status shows it.
func (a Amount) Decimal() string { return strings.Replace(a.String(), "$", "", 1) }

// Price is a model's price per token, in picodollars.
type Price struct {
	Input, Output           Amount
	CachedInput, CacheWrite Amount
	// BatchInput and BatchOutput are the prices through the batch API;
	// BatchCachedInput and BatchCacheWrite get the same discount as BatchInput.
	BatchInput, BatchOutput           Amount
	BatchCachedInput, BatchCacheWrite Amount
}

// PerMillion are a model's prices as listed: dollars per million tokens, as
// decimal strings; empty optional ones take their defaults.
type PerMillion struct {
	Input, Output, CachedInput, CacheWrite, BatchInput, BatchOutput string
}

// NewPrice converts listed prices (dollars per million tokens) to a Price.
// Unset cached and cache-write prices are the input price; unset batch
// prices are half the synchronous ones.
func NewPrice(l PerMillion) (*Price, error) {
	perToken := func(name, s string) (Amount, error) {
		a, err := ParseDollars(s)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		// Dollars per million tokens: picodollars per token, rounded.
		return (a + 500_000) / 1_000_000, nil
	}
	var p Price
	var err error
	if p.Input, err = perToken("inputPerMillion", l.Input); err != nil {
		return nil, err
	}
	if p.Output, err = perToken("outputPerMillion", l.Output); err != nil {
		return nil, err
	}
	p.CachedInput, p.CacheWrite, p.BatchInput, p.BatchOutput = p.Input, p.Input, p.Input/2, p.Output/2
	for _, o := range []struct {
		name, value string
		dst         *Amount
	}{
		{"cachedInputPerMillion", l.CachedInput, &p.CachedInput}, {"cacheWriteInputPerMillion", l.CacheWrite, &p.CacheWrite},
		{"batchInputPerMillion", l.BatchInput, &p.BatchInput}, {"batchOutputPerMillion", l.BatchOutput, &p.BatchOutput},
	} {
		if o.value == "" {
			continue
		}
		if *o.dst, err = perToken(o.name, o.value); err != nil {
			return nil, err
		}
	}
	p.BatchCachedInput, p.BatchCacheWrite = discounted(p.CachedInput, p.BatchInput, p.Input), discounted(p.CacheWrite, p.BatchInput, p.Input)
	return &p, nil
}

// discounted is price with the discount that took full to batch.
func discounted(price, batch, full Amount) Amount {
	if full == 0 {
		return batch
	}
	return Amount(new(big.Int).Quo(new(big.Int).Mul(big.NewInt(int64(price)), big.NewInt(int64(batch))), big.NewInt(int64(full))).Int64())
}

// Of is what a call that used u costs; batch says it went through the batch API.
func (p *Price) Of(u provider.Usage, batch bool) Amount {
	cached, written := u.CachedInputTokens, u.CacheWriteInputTokens
	plain := max(u.InputTokens-cached-written, 0)
	in, out, ci, cw := p.Input, p.Output, p.CachedInput, p.CacheWrite
	if batch {
		in, out, ci, cw = p.BatchInput, p.BatchOutput, p.BatchCachedInput, p.BatchCacheWrite
	}
	return Amount(plain)*in + Amount(cached)*ci + Amount(written)*cw + Amount(u.OutputTokens)*out
}

// Worst is the most a call of inputTokens and at most outputTokens can cost:
// every input token at the dearest input price.
func (p *Price) Worst(inputTokens, outputTokens int64, batch bool) Amount {
	in, out := max(p.Input, p.CacheWrite), p.Output
	if batch {
		in, out = max(p.BatchInput, p.BatchCacheWrite), p.BatchOutput
	}
	return Amount(inputTokens)*in + Amount(outputTokens)*out
}
