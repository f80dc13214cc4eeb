package fakellm

import (
	"math"
	"sync"
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
	limitRequests = "requests"
	limitTokens   = "tokens"
)

// decision is the limiter's answer for one request.
type decision struct {
	ok    bool
	wait  int64  // when !ok: nanoseconds until the request would be accepted
	limit string // when !ok: limitRequests or limitTokens
	never bool   // when !ok: the request alone exceeds the token limit
}

// limiter enforces the request and input-token limits. Only accepted requests
// consume budget. It exists only when a limit is configured, so an unlimited
// server takes no lock here.
type limiter struct {
	mu     sync.Mutex
	bucket bool
	window int64
	rpm    int64 // 0 = unlimited
	tpm    int64 // 0 = unlimited

	// Window mode: the accepted requests still inside the window.
	log    deque[event]
	logTok int64

	// Bucket mode: levels refill continuously at rpm (tpm) per window, up to
	// their capacity; a request costs 1 request and its input tokens.
	reqCap, tokCap     float64
	reqLevel, tokLevel float64
	last               int64
}

// bucketSlack absorbs float rounding, so that a client that waited exactly the
// advertised time is not turned away for want of 1e-15 of a request.
const bucketSlack = 1e-9

func newLimiter(cfg Config, window int64, now int64) *limiter {
	l := &limiter{
		bucket: cfg.LimitMode == LimitBucket,
		window: window,
		rpm:    int64(cfg.RequestsPerMinute),
		tpm:    int64(cfg.InputTokensPerMinute),
		reqCap: float64(cfg.RequestsPerMinute),
		tokCap: float64(cfg.InputTokensPerMinute),
	}
	if cfg.Burst > 0 {
		l.reqCap = float64(cfg.Burst)
	}
	l.resetLocked(now)
	return l
}

func (l *limiter) reset(now int64) {
	l.mu.Lock()
	l.resetLocked(now)
	l.mu.Unlock()
}

func (l *limiter) resetLocked(now int64) {
	l.log.reset()
	l.logTok = 0
	l.reqLevel, l.tokLevel, l.last = l.reqCap, l.tokCap, now
}

// admit decides on a request with the given input tokens arriving at now and, if
// it is accepted, charges it.
func (l *limiter) admit(now, tokens int64) decision {
	if l.tpm > 0 && tokens > l.tpm {
		return decision{limit: limitTokens, never: true}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bucket {
		return l.admitBucket(now, tokens)
	}
	return l.admitWindow(now, tokens)
}

func (l *limiter) admitWindow(now, tokens int64) decision {
	for !l.log.empty() && l.log.front().t <= now-l.window {
		l.logTok -= l.log.front().tokens
		l.log.popFront()
	}
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

func (l *limiter) admitBucket(now, tokens int64) decision {
	if elapsed := float64(now - l.last); elapsed > 0 {
		w := float64(l.window)
		l.reqLevel = math.Min(l.reqCap, l.reqLevel+elapsed*float64(l.rpm)/w)
		l.tokLevel = math.Min(l.tokCap, l.tokLevel+elapsed*float64(l.tpm)/w)
		l.last = now
	}
	d := decision{ok: true}
	if need := 1 - l.reqLevel; l.rpm > 0 && need > bucketSlack {
		d = decision{wait: refillTime(need, l.rpm, l.window), limit: limitRequests}
	}
	if need := float64(tokens) - l.tokLevel; l.tpm > 0 && need > bucketSlack {
		if w := refillTime(need, l.tpm, l.window); d.ok || w > d.wait {
			d = decision{wait: w, limit: limitTokens}
		}
	}
	if d.ok {
		if l.rpm > 0 {
			l.reqLevel--
		}
		if l.tpm > 0 {
			l.tokLevel -= float64(tokens)
		}
	}
	return d
}

// refillTime is how long a bucket refilling at rate per window takes to gain
// need, rounded up to the nanosecond so that waiting that long is always enough.
func refillTime(need float64, rate, window int64) int64 {
	return max(int64(math.Ceil(need*float64(window)/float64(rate))), 1)
}
