// Package fakellm is a fake OpenAI- and Anthropic-compatible model server: a test
// double at the network boundary. Unit tests run it under httptest, benchmarks
// drive it at high request rates against configured rate limits, and the fakellm
// command serves it for an offline quickstart.
//
//	srv := httptest.NewServer(fakellm.New(fakellm.Config{RequestsPerMinute: 60}))
//	defer srv.Close()
//	// OpenAI base URL: srv.URL + "/v1"; Anthropic base URL: srv.URL.
//
// Rate limits are enforced as providers document them (Config.LimitMode): token
// buckets refilled continuously, holding a second of each per-minute limit, and
// every answer carries the provider's rate-limit headers.
//
// It serves POST /v1/chat/completions (OpenAI chat completions, non-streaming),
// POST /v1/messages (Anthropic messages, non-streaming), GET /v1/models,
// GET /healthz, GET /stats, GET /stats/answers, GET /stats/limits and
// POST /stats/reset.
//
// Answers come from Config.Responder, or else from DefaultReply, whose rules let a
// test script the model from the prompt (REPLY:, TOOL:, STATUS:, SLEEP: lines,
// arithmetic, judge prompts). Faults (failures, dropped connections, jitter) are
// drawn from a generator seeded by Config.Seed and indexed by the request's arrival
// number, so a run with the same seed and the same arrival order behaves the same.
package fakellm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Server. The zero value is a well-behaved, unlimited server.
type Config struct {
	// Latency is waited before answering each accepted request.
	Latency time.Duration
	// Jitter adds a uniform random latency in [0, Jitter).
	Jitter time.Duration

	// RequestsPerMinute, InputTokensPerMinute and OutputTokensPerMinute are
	// the rate limits per Window; 0 means unlimited. Input tokens are counted
	// by CountInputTokens; output tokens are charged max_tokens when a request
	// is accepted (DefaultMaxOutputTokens when it sets none) and what the
	// answer did not use is given back (bucket mode only).
	RequestsPerMinute     int
	InputTokensPerMinute  int
	OutputTokensPerMinute int
	// Window is the limits' period; 0 means one minute.
	Window time.Duration
	// LimitMode is LimitBucket (the default: each limit a token bucket refilled
	// continuously, holding BurstWindow of it, as providers document) or
	// LimitWindow (lenient: at most N accepted requests in any sliding Window).
	LimitMode string
	// BurstWindow is how much of each limit its bucket holds, as the time the
	// limit takes to refill it; 0 means Window/60 (a second of a per-minute
	// limit: 60 RPM enforced as 1 request per second). A request bucket holds
	// at least one request.
	BurstWindow time.Duration
	// Burst, if set, is the request bucket's capacity instead.
	Burst int
	// ClockOffset is added to the wall-clock times the server reports
	// (batches' creation times, rate-limit reset times): a provider's clock
	// is not the client's.
	ClockOffset time.Duration
	// OmitRetryAfter makes 429s carry no retry-after headers at all.
	OmitRetryAfter bool
	// OmitRetryAfterMillis makes 429s carry only retry-after (whole seconds),
	// not retry-after-ms.
	OmitRetryAfterMillis bool

	// FailureRate is the fraction of accepted requests answered with an injected
	// 500, 502 or 503 (or, on the Anthropic endpoint, 529).
	FailureRate float64
	// DropRate is the fraction of requests whose connection is closed without
	// any answer.
	DropRate float64
	// WrongRate is the fraction of arithmetic questions DefaultReply answers off
	// by one, chosen by a hash of the question so that reruns agree.
	WrongRate float64

	// APIKey, when set, must be sent as "Authorization: Bearer KEY" or as
	// "x-api-key: KEY" (either header on either API), else the answer is 401.
	APIKey string
	// Seed seeds the random faults and jitter.
	Seed int64
	// Responder, when set, answers instead of DefaultReply. It must be safe for
	// concurrent use.
	Responder func(Request) Reply

	// BatchDelay is how long a batch (of either batch API) takes: it is
	// processed when it is next looked at after that. 0 processes it at the
	// first look.
	BatchDelay time.Duration
	// BatchFailureRate is the fraction of a batch's requests that fail (a 500
	// in OpenAI's error file, "errored" in Anthropic's results), and
	// BatchExpireRate the fraction that expire (not processed within the
	// completion window).
	BatchFailureRate float64
	BatchExpireRate  float64
	// BatchCancelDelay is how long a batch's cancellation takes to take
	// effect (it shows "cancelling", "canceling" meanwhile, and requests
	// processed by then are answered); 0 means a second.
	BatchCancelDelay time.Duration
}

// The values of Config.LimitMode.
const (
	LimitWindow = "window"
	LimitBucket = "bucket"
)

// DefaultMaxOutputTokens is what a request without max_tokens is charged of
// an output-token limit.
const DefaultMaxOutputTokens = 4096

// Validate reports what is wrong with c, if anything. New panics on an invalid
// Config, so a command should validate user input first.
func (c Config) Validate() error {
	var errs []error
	if c.Latency < 0 || c.Jitter < 0 || c.Window < 0 || c.BurstWindow < 0 || c.BatchCancelDelay < 0 {
		errs = append(errs, errors.New("latency, jitter, window, burst window and batch cancel delay must not be negative"))
	}
	if c.RequestsPerMinute < 0 || c.InputTokensPerMinute < 0 || c.OutputTokensPerMinute < 0 || c.Burst < 0 {
		errs = append(errs, errors.New("rate limits and burst must not be negative"))
	}
	switch c.LimitMode {
	case "", LimitWindow, LimitBucket:
	default:
		errs = append(errs, fmt.Errorf("limit mode %q is neither %q nor %q", c.LimitMode, LimitWindow, LimitBucket))
	}
	for _, r := range []struct {
		name string
		v    float64
	}{{"failure rate", c.FailureRate}, {"drop rate", c.DropRate}, {"wrong rate", c.WrongRate},
		{"batch failure rate", c.BatchFailureRate}, {"batch expire rate", c.BatchExpireRate}} {
		if !(r.v >= 0 && r.v <= 1) { // also rejects NaN
			errs = append(errs, fmt.Errorf("%s %v is not in [0, 1]", r.name, r.v))
		}
	}
	return errors.Join(errs...)
}

// Stats are the server's counters since New or the last Reset.
type Stats struct {
	Requests    int64 `json:"requests"`    // every request to a model endpoint
	Succeeded   int64 `json:"succeeded"`   // answered 200
	RateLimited int64 `json:"rateLimited"` // answered 429
	Failed      int64 `json:"failed"`      // answered with an injected (or responder-chosen) 5xx
	Dropped     int64 `json:"dropped"`     // connection closed without an answer
	Rejected    int64 `json:"rejected"`    // other 4xx (bad request, unauthorized)
	// InputTokens and OutputTokens are those of the successful answers.
	InputTokens  int64 `json:"inputTokens"`
	OutputTokens int64 `json:"outputTokens"`
	// MaxRequestsInWindow is the most requests that arrived (whatever their fate)
	// within any sliding Window: how tests show that clients, all together, kept
	// under a limit.
	MaxRequestsInWindow int `json:"maxRequestsInWindow"`
	// MaxInputTokensInWindow is the same for the input tokens of arriving
	// requests, counted when their body has been parsed (requests dropped,
	// unauthorized or malformed before that carry none).
	MaxInputTokensInWindow int64 `json:"maxInputTokensInWindow"`
	// MaxInFlight is the most model requests the server was handling at once
	// (from arrival to the end of the answer).
	MaxInFlight int64 `json:"maxInFlight"`
	// Counted counts the token-counting requests (OpenAI's
	// /v1/responses/input_tokens, Anthropic's /v1/messages/count_tokens):
	// they are not model requests.
	Counted int64 `json:"counted"`
	// Batches counts the batches created (either API), BatchRequests their
	// requests, and DuplicateBatchRequests the requests submitted again
	// while an earlier submission of their custom_id was pending or had
	// succeeded. BatchInputTokens and BatchOutputTokens are those of the
	// batches' successful answers (not in InputTokens and OutputTokens).
	Batches                int64 `json:"batches"`
	BatchRequests          int64 `json:"batchRequests"`
	DuplicateBatchRequests int64 `json:"duplicateBatchRequests"`
	BatchInputTokens       int64 `json:"batchInputTokens"`
	BatchOutputTokens      int64 `json:"batchOutputTokens"`
	// BatchesCancelled counts the batches cancelled before they ended, and
	// BatchCancelRequests the requests to cancel one (asked again while it
	// was cancelling, or after it ended, too).
	BatchesCancelled    int64 `json:"batchesCancelled"`
	BatchCancelRequests int64 `json:"batchCancelRequests"`
	// MaxBatchesInProgress is the most batches in progress at once (not
	// ended: processing, or cancelling).
	MaxBatchesInProgress int64 `json:"maxBatchesInProgress"`
}

// Server is the fake model server; it is an http.Handler. Create it with New.
type Server struct {
	cfg    Config
	window int64 // cfg.Window in nanoseconds, defaulted
	key    []byte
	mux    *http.ServeMux
	start  time.Time
	// clock returns nanoseconds since start on the monotonic clock; tests in
	// this package replace it.
	clock func() int64

	lim   *limiter // nil when no limit is configured: no lock on the hot path
	track tracker
	ids   atomic.Uint64 // response and tool-call ids; never reset, so ids stay unique

	requests, succeeded, rateLimited, failed, dropped, rejected atomic.Int64
	inputTokens, outputTokens                                   atomic.Int64
	// counted counts token-counting requests (not model requests).
	counted   atomic.Int64
	batchOnce sync.Once
	batch     *batches
	// inFlight counts the model requests being handled; maxInFlight is its peak.
	inFlight, maxInFlight atomic.Int64
	// answers holds when each model's requests were answered 200, by the
	// model the request named (the first maxAnswers in all).
	answersMu sync.Mutex
	answers   map[string][]time.Time
	answered  int
	// decisions are the rate limiter's decisions (the first maxDecisions).
	decisionsMu sync.Mutex
	decisions   []LimitDecision
}

// LimitDecision is one rate-limit decision: when it was made, and for a
// request refused, which limit refused it and how much later it would have
// been accepted. A refusal by a few milliseconds is a call that arrived a
// moment early (the network, a busy node); one by most of a request's
// spacing is two calls sent together.
type LimitDecision struct {
	At        int64  `json:"at"` // Unix nanoseconds
	OK        bool   `json:"ok"`
	Limit     string `json:"limit,omitempty"`
	WaitNanos int64  `json:"waitNanos,omitempty"`
}

// Decisions returns the rate limiter's decisions, in the order they were
// made (GET /stats/limits serves them).
func (s *Server) Decisions() []LimitDecision {
	s.decisionsMu.Lock()
	defer s.decisionsMu.Unlock()
	return slices.Clone(s.decisions)
}

func (s *Server) noteDecision(at time.Time, d decision) {
	s.decisionsMu.Lock()
	defer s.decisionsMu.Unlock()
	if len(s.decisions) >= maxDecisions {
		return
	}
	ld := LimitDecision{At: at.UnixNano(), OK: d.ok}
	if !d.ok {
		ld.Limit, ld.WaitNanos = d.limit, d.wait
	}
	s.decisions = append(s.decisions, ld)
}

// maxAnswers bounds the answer times kept.
const maxAnswers = 1 << 20

// maxDecisions bounds the rate-limit decisions kept (about 3 MiB): what a
// test under a limit sends in minutes, not what a benchmark sends.
const maxDecisions = 1 << 16

// Answers returns when each model's requests were answered 200, by the model
// each request named: what tests measure a rate or a split with (GET
// /stats/answers serves it as Unix nanoseconds).
func (s *Server) Answers() map[string][]time.Time {
	s.answersMu.Lock()
	defer s.answersMu.Unlock()
	out := make(map[string][]time.Time, len(s.answers))
	for m, at := range s.answers {
		out[m] = slices.Clone(at)
	}
	return out
}

func (s *Server) noteAnswer(model string) {
	s.answersMu.Lock()
	defer s.answersMu.Unlock()
	if s.answered >= maxAnswers {
		return
	}
	if s.answers == nil {
		s.answers = map[string][]time.Time{}
	}
	s.answers[model] = append(s.answers[model], time.Now())
	s.answered++
}

// serveCounted handles a model request, counting it in flight meanwhile.
func (s *Server) serveCounted(w http.ResponseWriter, r *http.Request, d dialect) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxInFlight.Load()
		if n <= m || s.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	s.serveModel(w, r, d)
}

// New returns a Server for cfg. It panics if cfg is invalid (see Config.Validate).
func New(cfg Config) *Server {
	if err := cfg.Validate(); err != nil {
		panic("fakellm: invalid Config: " + err.Error())
	}
	if cfg.Window == 0 {
		cfg.Window = time.Minute
	}
	s := &Server{cfg: cfg, window: int64(cfg.Window), key: []byte(cfg.APIKey), start: time.Now()}
	s.clock = func() int64 { return int64(time.Since(s.start)) }
	s.track.window = s.window
	if cfg.RequestsPerMinute > 0 || cfg.InputTokensPerMinute > 0 || (cfg.OutputTokensPerMinute > 0 && cfg.LimitMode != LimitWindow) {
		s.lim = newLimiter(cfg, s.window, 0)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		s.serveCounted(w, r, openAI{})
	})
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) {
		s.serveCounted(w, r, anthropic{})
	})
	mux.HandleFunc("POST /v1/responses/input_tokens", func(w http.ResponseWriter, r *http.Request) {
		s.serveCount(w, r, openAI{}, parseResponsesCount, func(n int64) any {
			return map[string]any{"object": "response.input_tokens", "input_tokens": n}
		})
	})
	mux.HandleFunc("POST /v1/messages/count_tokens", func(w http.ResponseWriter, r *http.Request) {
		s.serveCount(w, r, anthropic{}, parseMessagesCount, func(n int64) any {
			return map[string]any{"input_tokens": n}
		})
	})
	s.registerBatchRoutes(mux)
	mux.HandleFunc("GET /v1/models", serveModels)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /datasets/arithmetic.jsonl", serveArithmetic)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Stats())
	})
	mux.HandleFunc("GET /stats/answers", func(w http.ResponseWriter, r *http.Request) {
		out := map[string][]int64{}
		for m, at := range s.Answers() {
			for _, t := range at {
				out[m] = append(out[m], t.UnixNano())
			}
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /stats/limits", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Decisions())
	})
	mux.HandleFunc("POST /stats/reset", func(w http.ResponseWriter, r *http.Request) {
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	})
	s.mux = mux
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// Stats returns a snapshot of the counters. Taken while requests are in flight,
// the counters are each exact but not mutually consistent.
func (s *Server) Stats() Stats {
	maxReqs, maxToks := s.track.maxima()
	st := Stats{
		Requests:               s.requests.Load(),
		Succeeded:              s.succeeded.Load(),
		RateLimited:            s.rateLimited.Load(),
		Failed:                 s.failed.Load(),
		Dropped:                s.dropped.Load(),
		Rejected:               s.rejected.Load(),
		InputTokens:            s.inputTokens.Load(),
		OutputTokens:           s.outputTokens.Load(),
		MaxRequestsInWindow:    maxReqs,
		MaxInputTokensInWindow: maxToks,
		MaxInFlight:            s.maxInFlight.Load(),
		Counted:                s.counted.Load(),
	}
	b := s.batchState()
	b.mu.Lock()
	st.Batches, st.BatchRequests, st.DuplicateBatchRequests = b.created, b.requests, b.duplicates
	st.BatchInputTokens, st.BatchOutputTokens, st.BatchesCancelled = b.inputTokens, b.outputTokens, b.cancelled
	st.BatchCancelRequests, st.MaxBatchesInProgress = b.cancelRequests, b.maxInProgress
	b.mu.Unlock()
	return st
}

// Reset zeroes the counters, the window maxima and the limiter state (an empty
// log, full buckets). Since faults are indexed by arrival number, which restarts
// too, the server then behaves as if new.
func (s *Server) Reset() {
	for _, c := range []*atomic.Int64{&s.requests, &s.succeeded, &s.rateLimited, &s.failed,
		&s.dropped, &s.rejected, &s.inputTokens, &s.outputTokens, &s.maxInFlight, &s.counted} {
		c.Store(0)
	}
	s.track.reset()
	s.answersMu.Lock()
	s.answers, s.answered = nil, 0
	s.answersMu.Unlock()
	s.decisionsMu.Lock()
	s.decisions = nil
	s.decisionsMu.Unlock()
	if s.lim != nil {
		s.lim.reset(s.clock())
	}
	b := s.batchState()
	b.mu.Lock()
	b.files, b.list, b.byID, b.customIDs = map[string][]byte{}, nil, map[string]*batch{}, map[string]string{}
	b.created, b.requests, b.duplicates, b.cancelled, b.inputTokens, b.outputTokens = 0, 0, 0, 0, 0, 0
	b.cancelRequests, b.maxInProgress = 0, 0
	b.mu.Unlock()
}

// Purposes of random draws: each decision about a request draws its own value.
const (
	drawDrop uint64 = iota + 1
	drawFail
	drawFailStatus
	drawJitter
	drawBatchExpire
	drawBatchFail
)

// random returns the value of draw for the request with arrival number seq: a
// stateless hash of (Seed, seq, draw), so no lock is needed and the outcome does
// not depend on how goroutines interleave after arrival.
func (s *Server) random(seq, draw uint64) uint64 {
	return mix64(mix64(uint64(s.cfg.Seed)) + seq*0x9e3779b97f4a7c15 + draw*0xd1b54a32d192ed03)
}

func (s *Server) chance(seq, draw uint64, rate float64) bool {
	return rate > 0 && unitFloat(s.random(seq, draw)) < rate
}

// serveModel handles a model request in the documented order: count, drop,
// authenticate, parse, rate-limit, fail, answer.
func (s *Server) serveModel(w http.ResponseWriter, r *http.Request, d dialect) {
	seq := uint64(s.requests.Add(1))
	s.track.arrive(s.clock)

	if s.chance(seq, drawDrop, s.cfg.DropRate) {
		s.dropped.Add(1)
		drop(w)
		return
	}

	if len(s.key) > 0 && !s.authorized(r.Header) {
		s.rejected.Add(1)
		d.writeError(w, apiError{status: http.StatusUnauthorized, message: "invalid or missing API key"})
		return
	}

	req, err := s.parse(w, r, d)
	if err != nil {
		s.rejected.Add(1)
		status := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			status = http.StatusRequestEntityTooLarge
		}
		d.writeError(w, apiError{status: status, message: err.Error()})
		return
	}
	in := CountInputTokens(req)
	s.track.addTokens(s.clock, in)

	var maxOut int64
	if s.lim != nil {
		maxOut = int64(req.MaxTokens)
		if maxOut <= 0 {
			maxOut = DefaultMaxOutputTokens
		}
		dec := s.lim.admit(s.clock(), in, maxOut)
		s.noteDecision(time.Now(), dec)
		d.rateLimitHeaders(w.Header(), dec.state, s.wallClock())
		if !dec.ok {
			s.rateLimited.Add(1)
			s.writeRateLimited(w, d, dec, in)
			return
		}
	}

	if s.chance(seq, drawFail, s.cfg.FailureRate) {
		s.failed.Add(1)
		codes := d.failureStatuses()
		code := codes[s.random(seq, drawFailStatus)%uint64(len(codes))]
		d.writeError(w, apiError{status: code, message: "injected failure: " + statusText(code)})
		return
	}

	var reply Reply
	if s.cfg.Responder != nil {
		reply = s.cfg.Responder(req)
	} else {
		reply = DefaultReply(req)
	}
	delay := s.cfg.Latency + reply.Delay
	if s.cfg.Jitter > 0 {
		delay += time.Duration(unitFloat(s.random(seq, drawJitter)) * float64(s.cfg.Jitter))
	}
	if delay > 0 && !sleep(r.Context(), delay) {
		if s.lim != nil {
			s.lim.settle(s.clock(), maxOut, 0)
		}
		return // the client has gone: nobody to answer
	}

	if reply.Status != 0 && reply.Status != http.StatusOK {
		if s.lim != nil {
			s.lim.settle(s.clock(), maxOut, 0)
		}
		s.writeStatus(w, d, reply.Status)
		return
	}
	calls, err := s.toolCalls(reply.ToolCalls, d.toolIDPrefix())
	if err != nil {
		s.failed.Add(1)
		d.writeError(w, apiError{status: http.StatusInternalServerError, message: err.Error()})
		return
	}
	text, calls, out, cut := limitOutput(req.MaxTokens, reply.Reasoning, reply.Text, calls)
	if s.lim != nil {
		s.lim.settle(s.clock(), maxOut, out)
	}
	s.succeeded.Add(1)
	s.noteAnswer(req.Model)
	s.inputTokens.Add(in)
	s.outputTokens.Add(out)
	d.writeCompletion(w, &completion{
		id:        strconv.FormatUint(s.ids.Add(1), 10),
		model:     req.Model,
		text:      text,
		toolCalls: calls,
		in:        in,
		out:       out,
		cut:       cut,
	})
}

// drop closes the connection without a word, which a client sees as a transport
// error. Where hijacking is impossible (HTTP/2), aborting the handler resets the
// stream instead.
func drop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func (s *Server) authorized(h http.Header) bool {
	if k := h.Get("X-Api-Key"); k != "" && subtle.ConstantTimeCompare([]byte(k), s.key) == 1 {
		return true
	}
	const bearer = "Bearer "
	a := h.Get("Authorization")
	return len(a) > len(bearer) && strings.EqualFold(a[:len(bearer)], bearer) &&
		subtle.ConstantTimeCompare([]byte(strings.TrimSpace(a[len(bearer):])), s.key) == 1
}

// maxBody bounds a request body; larger ones are answered 413.
const maxBody = 32 << 20

// bodyPool recycles request-body buffers; the parsed Request copies what it keeps.
var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (s *Server) parse(w http.ResponseWriter, r *http.Request, d dialect) (Request, error) {
	buf := bodyPool.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 1<<20 { // let rare huge buffers go
			buf.Reset()
			bodyPool.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxBody)); err != nil {
		return Request{}, fmt.Errorf("reading the request body: %w", err)
	}
	req, err := d.parse(buf.Bytes())
	if err != nil {
		return Request{}, err
	}
	req.Header = r.Header
	req.wrongRate = s.cfg.WrongRate
	return req, nil
}

// wallClock is the server's wall clock, as it reports times: ClockOffset
// away from the client's.
func (s *Server) wallClock() time.Time { return time.Now().Add(s.cfg.ClockOffset) }

func (s *Server) writeRateLimited(w http.ResponseWriter, d dialect, dec decision, in int64) {
	limit := s.cfg.RequestsPerMinute
	switch dec.limit {
	case limitTokens:
		limit = s.cfg.InputTokensPerMinute
	case limitOutputTokens:
		limit = s.cfg.OutputTokensPerMinute
	}
	if dec.never {
		// No wait would help, so no retry-after: a client must not retry this.
		what := fmt.Sprintf("%d input tokens exceed the limit of %d input tokens", in, limit)
		if dec.limit == limitOutputTokens {
			what = fmt.Sprintf("its max_tokens exceeds the limit of %d output tokens", limit)
		}
		d.writeError(w, apiError{status: http.StatusTooManyRequests, limit: dec.limit, message: fmt.Sprintf(
			"Request too large: %s per %v.", what, s.cfg.Window)})
		return
	}
	wait := time.Duration(dec.wait)
	if !s.cfg.OmitRetryAfter {
		h := w.Header()
		// Rounded up, so that a client waiting exactly as told is accepted.
		h.Set("Retry-After", strconv.FormatInt(int64(max(ceilDiv(wait, time.Second), 1)), 10))
		if !s.cfg.OmitRetryAfterMillis {
			h.Set("Retry-After-Ms", strconv.FormatInt(int64(ceilDiv(wait, time.Millisecond)), 10))
		}
	}
	d.writeError(w, apiError{status: http.StatusTooManyRequests, limit: dec.limit, message: fmt.Sprintf(
		"Rate limit reached for %s: limit %d per %v. Please try again in %v.", dec.limit, limit, s.cfg.Window, wait.Round(time.Millisecond))})
}

func ceilDiv(d, unit time.Duration) time.Duration {
	return (d + unit - 1) / unit
}

// writeStatus answers with a status chosen by the responder, counted by class.
func (s *Server) writeStatus(w http.ResponseWriter, d dialect, status int) {
	if status < 100 || status > 599 { // WriteHeader would panic
		status = http.StatusInternalServerError
	}
	switch {
	case status == http.StatusTooManyRequests:
		s.rateLimited.Add(1)
	case status >= 400 && status < 500:
		s.rejected.Add(1)
	default:
		s.failed.Add(1)
	}
	d.writeError(w, apiError{status: status, limit: limitRequests, message: "status requested by the responder: " + statusText(status)})
}

// toolCalls returns a copy of calls with ids filled in and arguments compacted,
// or an error if a responder produced arguments that are not JSON.
func (s *Server) toolCalls(calls []ToolCall, prefix string) ([]ToolCall, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	out := make([]ToolCall, len(calls))
	for i, tc := range calls {
		if tc.ID == "" {
			tc.ID = prefix + strconv.FormatUint(s.ids.Add(1), 10)
		}
		if len(bytes.TrimSpace(tc.Arguments)) == 0 {
			tc.Arguments = json.RawMessage("{}")
		} else {
			var b bytes.Buffer
			if err := json.Compact(&b, tc.Arguments); err != nil {
				return nil, fmt.Errorf("fakellm: the responder's arguments for tool %q are not JSON: %w", tc.Name, err)
			}
			tc.Arguments = b.Bytes()
		}
		out[i] = tc
	}
	return out, nil
}

// sleep waits for d unless ctx ends first, and reports whether it waited it all.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func statusText(code int) string {
	if code == 529 { // Anthropic's, unknown to net/http
		return "Overloaded"
	}
	if t := http.StatusText(code); t != "" {
		return t
	}
	return "status " + strconv.Itoa(code)
}

// models is what GET /v1/models lists. Any model name is accepted anyway.
var models = []string{"fake-model", "fake-judge"}

// modelEntry carries both APIs' fields, so both SDKs can read the list.
type modelEntry struct {
	ID          string `json:"id"`
	Object      string `json:"object"`       // OpenAI
	Created     int64  `json:"created"`      // OpenAI
	OwnedBy     string `json:"owned_by"`     // OpenAI
	Type        string `json:"type"`         // Anthropic
	DisplayName string `json:"display_name"` // Anthropic
	CreatedAt   string `json:"created_at"`   // Anthropic
}

type modelList struct {
	Object  string       `json:"object"`
	Data    []modelEntry `json:"data"`
	HasMore bool         `json:"has_more"`
	FirstID string       `json:"first_id"`
	LastID  string       `json:"last_id"`
}

func serveModels(w http.ResponseWriter, _ *http.Request) {
	list := modelList{Object: "list", FirstID: models[0], LastID: models[len(models)-1]}
	for _, m := range models {
		list.Data = append(list.Data, modelEntry{
			ID: m, Object: "model", OwnedBy: "fakellm",
			Type: "model", DisplayName: m, CreatedAt: "1970-01-01T00:00:00Z",
		})
	}
	writeJSON(w, http.StatusOK, list)
}

var contentTypeJSON = []string{"application/json"}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	w.Write(b)
}

// serveArithmetic serves a dataset for url: sources in tests (so that no test
// reaches the internet): ?n= (default 10) arithmetic questions this server
// answers, as JSON lines {"id": "<prefix>-<i>", "input": "What is i+1?",
// "expected": "<i+1>"}, ids prefixed by ?prefix= (default "q").
func serveArithmetic(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.URL.Query().Get("n"))
	if err != nil || n < 0 || n > 1_000_000 {
		n = 10
	}
	prefix := r.URL.Query().Get("prefix")
	if prefix == "" {
		prefix = "q"
	}
	w.Header().Set("Content-Type", "application/jsonl")
	bw := bufio.NewWriter(w)
	WriteArithmetic(bw, prefix, n)
	bw.Flush()
}

// WriteArithmetic writes n questions the server answers, as JSON lines with
// ids prefix-0 .. prefix-(n-1): what GET /datasets/arithmetic.jsonl serves.
func WriteArithmetic(w io.Writer, prefix string, n int) {
	for i := range n {
		fmt.Fprintf(w, `{"id":%q,"input":"What is %d+1?","expected":"%d"}`+"\n", fmt.Sprintf("%s-%d", prefix, i), i, i+1)
	}
}

// ArithmeticJSONL is WriteArithmetic's data as a string.
func ArithmeticJSONL(prefix string, n int) string {
	var b strings.Builder
	WriteArithmetic(&b, prefix, n)
	return b.String()
}
