// Package results defines the per-sample record, its summary, and the local
// checkpoint: a journal per model and dataset that finished records are appended
// to as they complete, from which results.jsonl (in sample order) and summary.json
// are assembled.
package results

import (
	"encoding/json"
	"math"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/spend"
	"github.com/proctor-dev/proctor/runner/stats"
)

// Record is the outcome of one sample on one model. Its JSON form is one line of
// results.jsonl; the field names and their order are part of Proctor's contract.
type Record struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Dataset string `json:"dataset"`
	// Output is the model's text answer (an agent's standard output).
	Output string `json:"output"`
	// Scores maps metric names to scores in [0, 1]. A metric whose scorer
	// failed scores 0, as does every metric of a sample that failed before it
	// was scored: as the summary counts them, so averaging results.jsonl
	// gives the summary's metrics.
	Scores map[string]float64 `json:"scores"`
	// Error says why the sample failed; "" when it did not.
	Error string `json:"error"`
	// ErrorKind says which step failed: "data" (the sample could not be read),
	// "prompt" (rendering), "hook" (hooks.beforeSample), "call" (the model),
	// "service" (a service went down while the sample ran) or "scoring" (a
	// scorer or the judge, after a successful call whose output, tokens and
	// latency the record keeps). --retry-errors re-scores a "scoring" failure without calling the
	// model again.
	ErrorKind string `json:"errorKind,omitempty"`
	// ScoreErrors says why each failed scorer failed, by metric name. One
	// scorer's failure is its own: the other metrics keep their scores.
	ScoreErrors map[string]string `json:"scoreErrors,omitempty"`
	// Rescored says the answer is an earlier run's, scored again (the
	// scoring changed, or its judge had failed): Output, tokens, latency and
	// Cost are that answer's, paid for then; JudgeCost adds this scoring's
	// judging to the earlier one's.
	Rescored bool `json:"rescored,omitempty"`
	// Attempts counts the calls made; 0 when the answer came from the cache.
	Attempts int `json:"attempts"`
	// LatencyMillis is how long the answering call took (the original call's, for a cached answer).
	LatencyMillis int64 `json:"latencyMillis"`
	InputTokens   int64 `json:"inputTokens"`
	OutputTokens  int64 `json:"outputTokens"`
	// ToolCalls are the tools the model called, when it called any.
	ToolCalls []provider.ToolCall `json:"toolCalls,omitempty"`
	// MaxTokensReached says the model stopped because it reached
	// parameters.maxTokens (OpenAI's finish_reason "length", Anthropic's
	// stop_reason "max_tokens"): its answer is cut, or empty when a
	// reasoning model spent them all thinking.
	MaxTokensReached bool `json:"maxTokensReached,omitempty"`
	// JudgeInputTokens and JudgeOutputTokens are what judging this sample cost.
	JudgeInputTokens  int64 `json:"judgeInputTokens,omitempty"`
	JudgeOutputTokens int64 `json:"judgeOutputTokens,omitempty"`
	// AgentCalls counts the model calls an agent made through its endpoints'
	// proxies (agent.endpoints) for this sample; their tokens are in
	// InputTokens and OutputTokens.
	AgentCalls int64 `json:"agentCalls,omitempty"`
	// ProxiedCalls are those calls, one by one, in the order they were
	// made: the first MaxProxiedCalls of them.
	ProxiedCalls []ProxiedCall `json:"proxiedCalls,omitempty"`
	// OutputTruncated says Output is not the whole answer: a cluster stores at
	// most 256 KiB of one, and none once the run's records reach their storage
	// budget (docs/tasks/cluster.md). OutputBytes is then the whole answer's size.
	OutputTruncated bool `json:"outputTruncated,omitempty"`
	OutputBytes     int  `json:"outputBytes,omitempty"`
	// Cost is what the sample's calls cost, in US dollars, at the model's
	// pricing (an agent's: its calls through agent.endpoints); the judge's
	// are in JudgeCost. Absent when unknown: the model has no pricing.
	Cost *float64 `json:"cost,omitempty"`
	// JudgeCost is what judging the sample cost, in US dollars; absent when
	// no judge was called, or when the judge model has no pricing.
	JudgeCost *float64 `json:"judgeCost,omitempty"`
	// Batch is the provider's id of the batch that answered it, when its
	// model runs in batch mode.
	Batch string `json:"batch,omitempty"`
	// JudgePending names the judge scorers whose verdicts a judge in batch
	// mode has yet to give: the answer is kept (this record), and a later
	// record of the sample, with their scores, replaces it.
	JudgePending []string `json:"judgePending,omitempty"`
	// Expected is the sample's expected answer (its dataset's expected
	// field) as JSON; absent when it has none.
	Expected json.RawMessage `json:"expected,omitempty"`
	// Input is the rendered request the model was sent: the system prompt
	// (role "system") and the messages. A cluster without a results store
	// cuts it as it cuts outputs (InputTruncated).
	Input          []provider.Message `json:"input,omitempty"`
	InputTruncated bool               `json:"inputTruncated,omitempty"`
	// Reasons are the judges' replies (their reasoning, ending with the
	// verdict line), by metric, each cut at MaxReasonBytes.
	Reasons map[string]string `json:"reasons,omitempty"`
	// StartedAt is when the sample's work began in the run that made the
	// record (absent for an answer from a batch), EndedAt when the record
	// was made: UTC, to the millisecond.
	StartedAt *time.Time `json:"startedAt,omitempty"`
	EndedAt   *time.Time `json:"endedAt,omitempty"`
	// CacheKey is the answering request's cache key, when the cache is on. It is
	// not part of results.jsonl; a cluster keeps it beside the record, so a later
	// run can reuse the answer.
	CacheKey string `json:"-"`
}

// ProxiedCall is a call an agent made through its endpoint's proxy.
type ProxiedCall struct {
	// Endpoint is the ModelEndpoint's name; Model the model id the request
	// asked for, if it named one; Path the request's path.
	Endpoint string `json:"endpoint"`
	Model    string `json:"model,omitempty"`
	Path     string `json:"path"`
	// Status is the HTTP status the agent was answered with: the endpoint's,
	// or the proxy's own when the endpoint could not answer; 0 when the
	// agent went away first. Error says what went wrong, redacted.
	Status int    `json:"status"`
	Error  string `json:"error,omitempty"`
	// Attempts counts the requests the proxy sent for it (it retries as
	// the engine retries its own calls).
	Attempts      int       `json:"attempts"`
	StartedAt     time.Time `json:"startedAt"`
	LatencyMillis int64     `json:"latencyMillis"`
	InputTokens   int64     `json:"inputTokens,omitempty"`
	OutputTokens  int64     `json:"outputTokens,omitempty"`
	// Cost is what it cost, in US dollars; absent when nothing prices its
	// model.
	Cost *float64 `json:"cost,omitempty"`
}

// MaxProxiedCalls bounds a record's ProxiedCalls; AgentCalls counts them
// all. MaxProxiedCallError bounds each one's Error.
const (
	MaxProxiedCalls     = 100
	MaxProxiedCallError = 512
)

// Answered says the record holds the model's answer: its call succeeded,
// whatever became of its scoring.
func (r *Record) Answered() bool {
	return r.Error == "" || r.ErrorKind == ErrorKindScoring || len(r.JudgePending) > 0
}

// KeepScores prepares an answered record to be scored again: it keeps the
// scores of the metrics in keep (their scorers unchanged) that succeeded and
// are not awaited, and drops the rest, with the scoring's errors and what it
// awaited; the scorers left score it again.
func (r *Record) KeepScores(keep map[string]bool) {
	scores := map[string]float64{}
	for m, v := range r.Scores {
		if _, failed := r.ScoreErrors[m]; keep[m] && !failed && !slices.Contains(r.JudgePending, m) {
			scores[m] = v
		}
	}
	r.Scores, r.ScoreErrors, r.JudgePending = scores, nil, nil
	if r.ErrorKind == ErrorKindScoring {
		r.Error, r.ErrorKind = "", ""
	}
}

// MaxReasonBytes bounds each of a record's Reasons: a judge's reasoning is
// for reading, and a long one is cut (its verdict line is the last).
const MaxReasonBytes = 8 << 10

// SetReason keeps a judge's reply as the record's reason for metric.
func (r *Record) SetReason(metric, reply string) {
	if r.Reasons == nil {
		r.Reasons = map[string]string{}
	}
	if len(reply) > MaxReasonBytes {
		// Keep the end, which holds the verdict.
		cut := len(reply) - MaxReasonBytes + len("…")
		for cut < len(reply) && !utf8.RuneStart(reply[cut]) {
			cut++
		}
		reply = "…" + reply[cut:]
	}
	r.Reasons[metric] = reply
}

// CutUTF8 cuts s to at most n bytes, not inside a character.
func CutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// The steps a sample can fail at (Record.ErrorKind).
const (
	ErrorKindData    = "data"
	ErrorKindPrompt  = "prompt"
	ErrorKindCall    = "call"
	ErrorKindScoring = "scoring"
	// ErrorKindHook: a hook of the sample's (hooks.beforeSample) failed.
	ErrorKindHook = "hook"
	// ErrorKindService: a service went down while the sample ran.
	ErrorKindService = "service"
)

// Summary is the outcome of one model on one dataset: one entry of summary.json's
// "results", and of an Evaluation's status.results.
type Summary struct {
	Model     string `json:"model"`
	Dataset   string `json:"dataset"`
	Total     int64  `json:"total"`
	Completed int64  `json:"completed"`
	Errored   int64  `json:"errored"`
	// MaxTokensReached counts the answers cut at parameters.maxTokens.
	MaxTokensReached int64 `json:"maxTokensReached,omitempty"`
	// Metrics maps metric names to means over the completed samples. An errored
	// sample scores 0 on every metric: failures lower a score visibly instead of
	// shrinking its denominator.
	Metrics map[string]float64 `json:"metrics"`
	// Intervals are the metrics' 95% confidence intervals: Wilson's for a
	// metric whose every score is 0 or 1, else Student's t.
	Intervals     map[string]stats.Interval `json:"intervals,omitempty"`
	LatencyMillis Latency                   `json:"latencyMillis"`
	Tokens        Tokens                    `json:"tokens"`
	Cost          Cost                      `json:"cost"`
}

// Cost is what a model's samples cost, in US dollars. An unknown cost (a
// model without pricing) is null, never 0.
type Cost struct {
	// Model is what the model's calls cost (an agent's, through its
	// endpoints); nil when unknown.
	Model *float64
	// Judge is what judging the answers cost, when Judged; nil when unknown.
	Judge *float64
	// Judged says a judge model was called for these samples.
	Judged bool
}

// costJSON is Cost's JSON form: "judge" is there only when a judge was
// called, and null when its cost is unknown.
type costJSON struct {
	Model *float64        `json:"model"`
	Judge json.RawMessage `json:"judge,omitempty"`
}

// MarshalJSON writes {"model": 1.23, "judge": 0.45}, with null for unknown.
func (c Cost) MarshalJSON() ([]byte, error) {
	j := costJSON{Model: c.Model}
	if c.Judged {
		b, err := json.Marshal(c.Judge)
		if err != nil {
			return nil, err
		}
		j.Judge = b
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *Cost) UnmarshalJSON(b []byte) error {
	var j costJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*c = Cost{Model: j.Model, Judged: len(j.Judge) > 0}
	if c.Judged {
		return json.Unmarshal(j.Judge, &c.Judge)
	}
	return nil
}

// Latency summarizes the latencies of successful samples.
type Latency struct {
	P50 int64 `json:"p50"`
	P95 int64 `json:"p95"`
}

// Tokens totals the tokens of all completed samples: the evaluated model's,
// and the judge's spent on them.
type Tokens struct {
	Input       int64 `json:"input"`
	Output      int64 `json:"output"`
	JudgeInput  int64 `json:"judgeInput,omitempty"`
	JudgeOutput int64 `json:"judgeOutput,omitempty"`
}

// Aggregate accumulates records into a Summary. The zero value is not usable; use
// NewAggregate.
type Aggregate struct {
	s         Summary
	metrics   []string
	sums      []float64
	latencies []int64
	// moments and binary follow each metric's scores, for its interval:
	// binary while every score is 0 or 1.
	moments []stats.Moments
	binary  []bool
	// cost and judgeCost add up exactly, in picodollars; a record of
	// unknown cost makes the total unknown.
	cost, judgeCost           spend.Amount
	costUnknown, judgeUnknown bool
	// records counts the records added; priced says the model has
	// pricing, so that a cost of no record is 0 rather than unknown.
	records int64
	priced  bool
}

// SetPriced says whether the model has pricing: the cost of a summary
// without a record is then 0; else it is unknown (null), as a model without
// pricing costs.
func (a *Aggregate) SetPriced(priced bool) { a.priced = priced }

// NewAggregate starts a summary for a model on a dataset of total samples, scored
// by the named metrics.
func NewAggregate(model, dataset string, total int64, metrics []string) *Aggregate {
	return &Aggregate{
		s:       Summary{Model: model, Dataset: dataset, Total: total},
		metrics: metrics,
		sums:    make([]float64, len(metrics)),
		moments: make([]stats.Moments, len(metrics)),
		binary:  slices.Repeat([]bool{true}, len(metrics)),
	}
}

// observe adds metric i's score of a finished sample.
func (a *Aggregate) observe(i int, v float64) {
	a.sums[i] += v
	a.moments[i].Add(v)
	a.binary[i] = a.binary[i] && (v == 0 || v == 1)
}

// Add counts one record.
func (a *Aggregate) Add(r *Record) {
	a.records++
	// A record awaiting its verdicts (a run stopped while its judge's
	// batches were out) was paid for, but is not finished.
	if len(r.JudgePending) == 0 {
		a.s.Completed++
	}
	a.s.Tokens.Input += r.InputTokens
	a.s.Tokens.Output += r.OutputTokens
	a.s.Tokens.JudgeInput += r.JudgeInputTokens
	a.s.Tokens.JudgeOutput += r.JudgeOutputTokens
	if r.Cost == nil {
		a.costUnknown = true
	} else {
		a.cost += spend.FromDollars(*r.Cost)
	}
	if r.JudgeCost != nil || r.JudgeInputTokens > 0 || r.JudgeOutputTokens > 0 {
		a.s.Cost.Judged = true
		if r.JudgeCost == nil {
			a.judgeUnknown = true
		} else {
			a.judgeCost += spend.FromDollars(*r.JudgeCost)
		}
	}
	if len(r.JudgePending) > 0 {
		return
	}
	// An errored sample scores 0 on the metrics it has no score for (all,
	// unless only some of its scorers failed).
	for i, m := range a.metrics {
		a.observe(i, r.Scores[m])
	}
	if r.Error != "" {
		a.s.Errored++
		if r.ErrorKind != ErrorKindScoring {
			return
		}
	}
	if r.MaxTokensReached {
		a.s.MaxTokensReached++
	}
	a.latencies = append(a.latencies, r.LatencyMillis)
}

// Summary returns the summary so far.
func (a *Aggregate) Summary() Summary {
	s := a.s
	s.Metrics = make(map[string]float64, len(a.metrics))
	if s.Completed > 0 {
		s.Intervals = make(map[string]stats.Interval, len(a.metrics))
		for i, m := range a.metrics {
			s.Metrics[m] = a.sums[i] / float64(s.Completed)
			if a.binary[i] {
				s.Intervals[m] = stats.Wilson(int64(math.Round(a.sums[i])), s.Completed, stats.Confidence)
			} else {
				s.Intervals[m] = a.moments[i].MeanInterval(stats.Confidence)
			}
		}
	}
	lat := slices.Clone(a.latencies)
	slices.Sort(lat)
	s.LatencyMillis = Latency{P50: percentile(lat, 0.50), P95: percentile(lat, 0.95)}
	if !a.costUnknown && (a.records > 0 || a.priced) {
		s.Cost.Model = ptr(a.cost.Dollars())
	}
	if s.Cost.Judged && !a.judgeUnknown {
		s.Cost.Judge = ptr(a.judgeCost.Dollars())
	}
	return s
}

// Costs returns the exact totals behind Summary().Cost: the model's and the
// judge's, in picodollars, and whether each is known.
func (a *Aggregate) Costs() (model, judge spend.Amount, modelKnown, judgeKnown bool) {
	return a.cost, a.judgeCost, !a.costUnknown, !a.judgeUnknown
}

func ptr[T any](v T) *T { return &v }

// percentile is the nearest-rank percentile of sorted values; 0 for none.
func percentile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
