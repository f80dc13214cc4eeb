package ratelimit

// WaterFill divides limit among users with weights (0 counts as 1) and caps (0:
// none), max-min fair: each gets limit × its weight / the total weight, unless
// its cap is less, and what caps leave goes to the others in proportion to their
// weights. Whole units that proportions leave over go one each to the users with
// the largest remainders, the first ones on a tie, so that a small limit still
// reaches some users and the shares sum to the limit (or to the caps' sum).
func WaterFill(limit int64, weights, caps []int64) []int64 {
	out := make([]int64, len(weights))
	w := make([]int64, len(weights))
	for i, x := range weights {
		w[i] = max(1, x)
	}
	open := make([]bool, len(w))
	for i := range open {
		open[i] = true
	}
	left := limit
	for {
		var total int64
		for i, o := range open {
			if o {
				total += w[i]
			}
		}
		if total == 0 {
			return out
		}
		capped := false
		for i, o := range open {
			// At or under its fair part of what is left: it gets its cap.
			if o && caps[i] > 0 && caps[i]*total <= left*w[i] {
				out[i], open[i] = caps[i], false
				left -= caps[i]
				capped = true
			}
		}
		if !capped {
			rems := make([]int64, len(w))
			given := int64(0)
			for i, o := range open {
				if o {
					out[i] = left * w[i] / total
					rems[i] = left * w[i] % total
					given += out[i]
				}
			}
			for ; given < left; given++ {
				best := -1
				for i, o := range open {
					if o && (best < 0 || rems[i] > rems[best]) {
						best = i
					}
				}
				out[best]++
				rems[best] = -1
			}
			return out
		}
	}
}

// Divide divides each dimension of lim (0: unlimited, not divided) among
// users with weights and caps (Limits; 0 in a dimension: no cap), max-min
// fair (WaterFill).
func Divide(lim Limits, weights []int64, caps []Limits) []Limits {
	out := make([]Limits, len(weights))
	for d, get := range limitDims {
		if get(lim) == 0 {
			continue
		}
		c := make([]int64, len(caps))
		for i := range caps {
			c[i] = get(caps[i])
		}
		for i, v := range WaterFill(get(lim), weights, c) {
			setDim(&out[i], d, v)
		}
	}
	return out
}

// limitDims reads each dimension of Limits, in order.
var limitDims = []func(Limits) int64{
	func(l Limits) int64 { return l.RequestsPerMinute },
	func(l Limits) int64 { return l.InputTokensPerMinute },
	func(l Limits) int64 { return l.OutputTokensPerMinute },
	func(l Limits) int64 { return l.MaxInFlight },
}

func setDim(l *Limits, d int, v int64) {
	switch d {
	case 0:
		l.RequestsPerMinute = v
	case 1:
		l.InputTokensPerMinute = v
	case 2:
		l.OutputTokensPerMinute = v
	case 3:
		l.MaxInFlight = v
	}
}
