package fakellm

import (
	"math"
	"sync"
	"time"
)

// All times in this file are int64 nanoseconds on the server's monotonic clock
// (time since New), so the arithmetic is exact and immune to wall-clock jumps.
// A sliding window of length W holds the events in (now-W, now]: an event at t
// stops counting at exactly t+W, which is what retry-after-ms promises.

// deque is a FIFO queue on a slice. Popped slots are reclaimed by sliding the live
// part down once it is at least half dead, so push and pop are amortised O(1).
type deque[T any] struct {
	buf  []T
	head int
}

func (d *deque[T]) push(v T) {
	if d.head >= 64 && d.head >= len(d.buf)/2 {
		n := copy(d.buf, d.buf[d.head:])
		d.buf = d.buf[:n]
		d.head = 0
	}
	d.buf = append(d.buf, v)
}

func (d *deque[T]) len() int    { return len(d.buf) - d.head }
func (d *deque[T]) at(i int) T  { return d.buf[d.head+i] }
func (d *deque[T]) front() T    { return d.buf[d.head] }
func (d *deque[T]) reset()      { d.buf, d.head = nil, 0 }
func (d *deque[T]) empty() bool { return d.head == len(d.buf) }

func (d *deque[T]) popFront() {
	d.head++
	if d.head == len(d.buf) { // empty: restart at the front without copying
		d.buf, d.head = d.buf[:0], 0
	}
}

// event is one request in a log: when it happened and its input tokens.
type event struct {
	t      int64
	tokens int64
}

// tracker measures the traffic that arrives, whatever happens to it afterwards, as
// the most requests and the most input tokens seen within any sliding window. Each
// measure has its own small mutex, held only to push, prune and compare.
type tracker struct {
	window int64

	mu       sync.Mutex
	arrivals deque[int64]
	maxReqs  int

	tokMu   sync.Mutex
	tokLog  deque[event]
	tokSum  int64
	maxToks int64
}

// arrive records one request. The clock is read under the lock so the log stays
// sorted however goroutines interleave; the count just after a push is the count
// of the window ending at that arrival, and some such window is the busiest.
func (t *tracker) arrive(clock func() int64) {
	t.mu.Lock()
	now := clock()
	for !t.arrivals.empty() && t.arrivals.front() <= now-t.window {
		t.arrivals.popFront()
	}
	t.arrivals.push(now)
	t.maxReqs = max(t.maxReqs, t.arrivals.len())
	t.mu.Unlock()
}

// addTokens records the input tokens of a request once its body has been parsed
// (they are unknown at arrival), timed at that moment.
func (t *tracker) addTokens(clock func() int64, n int64) {
	t.tokMu.Lock()
	now := clock()
	for !t.tokLog.empty() && t.tokLog.front().t <= now-t.window {
		t.tokSum -= t.tokLog.front().tokens
		t.tokLog.popFront()
	}
	t.tokLog.push(event{now, n})
	t.tokSum += n
	t.maxToks = max(t.maxToks, t.tokSum)
	t.tokMu.Unlock()
}

func (t *tracker) maxima() (int, int64) {
	t.mu.Lock()
	reqs := t.maxReqs
	t.mu.Unlock()
	t.tokMu.Lock()
	toks := t.maxToks
	t.tokMu.Unlock()
	return reqs, toks
}

func (t *tracker) reset() {
	t.mu.Lock()
	t.arrivals.reset()
	t.maxReqs = 0
	t.mu.Unlock()
	t.tokMu.Lock()
	t.tokLog.reset()
	t.tokSum, t.maxToks = 0, 0
	t.tokMu.Unlock()
}

// Names of the limits, as OpenAI's 429 error type spells them.
const (
	limitRequests     = "requests"
	limitTokens       = "tokens"
	limitOutputTokens = "output_tokens"
)

// decision is the limiter's answer for one request.
type decision struct {
	ok    bool
	wait  int64  // when !ok: nanoseconds until the request would be accepted
	limit string // when !ok: limitRequests, limitTokens or limitOutputTokens
	never bool   // when !ok: the request alone exceeds a token limit
	// state is what the rate-limit headers report, after the decision.
	state limitState
}

// limitState is a limit's state as the providers' rate-limit headers report
// it: per dimension, the limit (per Window), what remains of it and when it is
// whole again.
type limitState struct {
	dims [3]dimState // requests, input tokens, output tokens
}

type dimState struct {
	limit     int64 // 0: not limited
	remaining int64
	reset     int64 // nanoseconds until remaining is back to limit
}

// limiter enforces the request, input-token and output-token limits. Only
// accepted requests consume budget. It exists only when a limit is configured,
// so an unlimited server takes no lock here.
//
// In bucket mode (the default) each limit is a token bucket refilled
// continuously at its rate, holding a second of it (limit/60 of a per-minute
// limit, at least one request), as providers document: Anthropic says its
// limits are token buckets and that a 60 RPM limit may be enforced as 1
// request per second. A request is accepted when each bucket holds what it
// costs, or is full when it costs more than the bucket can hold (then the
// bucket goes into debt); output tokens are charged max_tokens up front and
// the unused part given back when the answer is complete, as Anthropic
// describes its output-token limit. The headers report each limit as a bucket
// of the whole limit (what remains, when it is full again), as both providers
// document their headers. Window mode is the lenient server of earlier tests:
// at most the limit in any sliding Window, and no output-token limit.
type limiter struct {
	mu     sync.Mutex
	bucket bool
	window int64
	rpm    int64 // 0 = unlimited
	tpm    int64 // 0 = unlimited
	otpm   int64 // 0 = unlimited (bucket mode only)

	// Window mode: the accepted requests still inside the window.
	log    deque[event]
	logTok int64

	// Bucket mode: levels refill continuously at their limits per window, up
	// to their capacity; caps are the enforcing buckets', and whole the
	// levels of buckets of the whole limit that the headers show.
	caps, levels, whole [3]float64
	last                int64
}

// bucketSlack absorbs float rounding, so that a client that waited exactly the
// advertised time is not turned away for want of 1e-15 of a request.
const bucketSlack = 1e-9

func newLimiter(cfg Config, window int64, now int64) *limiter {
	l := &limiter{
		bucket: cfg.LimitMode != LimitWindow,
		window: window,
		rpm:    int64(cfg.RequestsPerMinute),
		tpm:    int64(cfg.InputTokensPerMinute),
		otpm:   int64(cfg.OutputTokensPerMinute),
	}
	burst := cfg.BurstWindow
	if burst <= 0 {
		burst = time.Duration(window / 60)
	}
	for d, limit := range l.limits() {
		l.caps[d] = float64(limit) * float64(burst) / float64(window)
	}
	l.caps[0] = max(l.caps[0], 1)
	if cfg.Burst > 0 {
		l.caps[0] = float64(cfg.Burst)
	}
	l.resetLocked(now)
	return l
}

func (l *limiter) limits() [3]int64 { return [3]int64{l.rpm, l.tpm, l.otpm} }

func (l *limiter) reset(now int64) {
	l.mu.Lock()
	l.resetLocked(now)
	l.mu.Unlock()
}

func (l *limiter) resetLocked(now int64) {
	l.log.reset()
	l.logTok = 0
	l.levels = l.caps
	for d, limit := range l.limits() {
		l.whole[d] = float64(limit)
	}
	l.last = now
}

// admit decides on a request with the given input tokens and max_tokens
// (output) arriving at now and, if it is accepted, charges it.
func (l *limiter) admit(now, tokens, maxOut int64) decision {
	if l.tpm > 0 && tokens > l.tpm {
		return decision{limit: limitTokens, never: true}
	}
	if l.bucket && l.otpm > 0 && maxOut > l.otpm {
		return decision{limit: limitOutputTokens, never: true}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var d decision
	if l.bucket {
		d = l.admitBucket(now, [3]int64{1, tokens, maxOut})
	} else {
		d = l.admitWindow(now, tokens)
	}
	d.state = l.stateLocked(now)
	return d
}

// settle gives back the output tokens charged up front that the answer did
// not use.
func (l *limiter) settle(now, charged, used int64) {
	if !l.bucket || l.otpm == 0 || charged <= used {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refill(now)
	back := float64(charged - used)
	l.levels[2] = math.Min(l.caps[2], l.levels[2]+back)
	l.whole[2] = math.Min(float64(l.otpm), l.whole[2]+back)
}

// state is what the headers of an answer at now report.
func (l *limiter) state(now int64) limitState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stateLocked(now)
}

func (l *limiter) stateLocked(now int64) limitState {
	var st limitState
	if l.bucket {
		l.refill(now)
		for d, limit := range l.limits() {
			if limit == 0 {
				continue
			}
			st.dims[d] = dimState{limit: limit, remaining: int64(math.Floor(math.Max(l.whole[d], 0) + bucketSlack)),
				reset: refillTime(float64(limit)-l.whole[d], limit, l.window)}
		}
		return st
	}
	l.pruneWindow(now)
	for d, limit := range [3]int64{l.rpm, l.tpm, 0} {
		if limit == 0 {
			continue
		}
		used := int64(l.log.len())
		if d == 1 {
			used = l.logTok
		}
		var reset int64
		if !l.log.empty() {
			reset = l.log.at(l.log.len()-1).t + l.window - now
		}
		st.dims[d] = dimState{limit: limit, remaining: max(limit-used, 0), reset: reset}
	}
	return st
}

func (l *limiter) pruneWindow(now int64) {
	for !l.log.empty() && l.log.front().t <= now-l.window {
		l.logTok -= l.log.front().tokens
		l.log.popFront()
	}
}

func (l *limiter) admitWindow(now, tokens int64) decision {
	l.pruneWindow(now)
	d := decision{ok: true}
	// Too many requests: the request fits once all but rpm-1 of the logged ones
	// have left the window, i.e. when entry n-rpm expires.
	if n := l.log.len(); l.rpm > 0 && int64(n) >= l.rpm {
		d = decision{wait: l.log.at(n-int(l.rpm)).t + l.window - now, limit: limitRequests}
	}
	// Too many tokens: the oldest entries must expire until what is left plus
	// this request fits; the wait is the expiry of the last one that must go.
	if excess := l.logTok + tokens - l.tpm; l.tpm > 0 && excess > 0 {
		var freed int64
		for i := 0; i < l.log.len(); i++ {
			e := l.log.at(i)
			if freed += e.tokens; freed >= excess {
				if w := e.t + l.window - now; d.ok || w > d.wait {
					d = decision{wait: w, limit: limitTokens}
				}
				break
			}
		}
	}
	if d.ok {
		l.log.push(event{now, tokens})
		l.logTok += tokens
	}
	return d
}

// refill brings the buckets' levels to now.
func (l *limiter) refill(now int64) {
	if elapsed := float64(now - l.last); elapsed > 0 {
		w := float64(l.window)
		for d, limit := range l.limits() {
			gain := elapsed * float64(limit) / w
			l.levels[d] = math.Min(l.caps[d], l.levels[d]+gain)
			l.whole[d] = math.Min(float64(limit), l.whole[d]+gain)
		}
		l.last = now
	}
}

var limitNames = [3]string{limitRequests, limitTokens, limitOutputTokens}

func (l *limiter) admitBucket(now int64, cost [3]int64) decision {
	l.refill(now)
	d := decision{ok: true}
	for i, limit := range l.limits() {
		if limit == 0 {
			continue
		}
		// A cost the bucket cannot hold is accepted when it is full.
		need := math.Min(float64(cost[i]), l.caps[i]) - l.levels[i]
		if need > bucketSlack {
			if w := refillTime(need, limit, l.window); d.ok || w > d.wait {
				d = decision{wait: w, limit: limitNames[i]}
			}
		}
	}
	if d.ok {
		for i, limit := range l.limits() {
			if limit > 0 {
				l.levels[i] -= float64(cost[i])
				l.whole[i] -= float64(cost[i])
			}
		}
	}
	return d
}

// refillTime is how long a bucket refilling at rate per window takes to gain
// need, rounded up to the nanosecond so that waiting that long is always enough.
func refillTime(need float64, rate, window int64) int64 {
	if need <= 0 {
		return 0
	}
	return max(int64(math.Ceil(need*float64(window)/float64(rate))), 1)
}
