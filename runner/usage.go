package runner

import (
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Usage is what a model sent and got back over the last minute, as the engine
// counted it: what a shared endpoint's status shows as achieved.
type Usage struct {
	// Requests counts the requests sent (answered, refused or failed).
	Requests     int64
	InputTokens  int64
	OutputTokens int64
	// Throttled counts the 429 answers.
	Throttled int64
}

// usageMeter counts a model's calls in one-second buckets over a sliding minute.
type usageMeter struct {
	clock   clockwork.Clock
	mu      sync.Mutex
	buckets [60]usageBucket
}

type usageBucket struct {
	second int64
	Usage
}

func (u *usageMeter) add(n Usage) {
	sec := u.clock.Now().Unix()
	u.mu.Lock()
	defer u.mu.Unlock()
	b := &u.buckets[sec%60]
	if b.second != sec {
		*b = usageBucket{second: sec}
	}
	b.Requests += n.Requests
	b.InputTokens += n.InputTokens
	b.OutputTokens += n.OutputTokens
	b.Throttled += n.Throttled
}

// lastMinute sums the buckets of the last 60 seconds.
func (u *usageMeter) lastMinute() Usage {
	now := u.clock.Now().Unix()
	u.mu.Lock()
	defer u.mu.Unlock()
	var out Usage
	for _, b := range u.buckets {
		if now-b.second < 60 && b.second <= now {
			out.Requests += b.Requests
			out.InputTokens += b.InputTokens
			out.OutputTokens += b.OutputTokens
			out.Throttled += b.Throttled
		}
	}
	return out
}

// usageWindow is how far back Usage looks.
const usageWindow = time.Minute
