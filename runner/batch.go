package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/retry"
	"github.com/proctor-dev/proctor/runner/score"
	"github.com/proctor-dev/proctor/runner/spend"
)

// BatchConfig runs a model's samples through its provider's batch API
// (Model.Batch).
type BatchConfig struct {
	// MaxRequests bounds a batch's requests (0: the provider's limit, which
	// bounds it anyway); MaxInFlight, the batches submitted and not ended at
	// once.
	MaxRequests, MaxInFlight int
	// PollInterval is how often batches in flight are looked at.
	PollInterval time.Duration
	// Retry is what becomes of requests a batch failed: "batch" (a new batch,
	// within Plan.Retry.MaxAttempts), "sync" (a call at once) or "none".
	Retry string
	// Deadline, when set, cancels a batch not ended that long after its
	// submission; what it had not answered is called at once.
	Deadline time.Duration
}

// batchItem is one sample of a batch model, waiting for its answer.
type batchItem struct {
	ds      *Dataset
	dsIndex int
	s       dataset.Sample
	req     *provider.Request
	// attempt counts the batches it was in that failed it.
	attempt int
	// hold is its reservation of the budget while its batch is in flight.
	hold *spend.Hold
	// pending, for a judge's batch, is the sample's record awaiting the
	// verdict, and in what the scorer is given to score it.
	pending *results.Record
	in      score.Input
	// tag identifies its request (requestTag), once computed.
	tag string
}

// batchRun is a batch model's state while it runs.
type batchRun struct {
	e   *Engine
	m   *modelRun
	b   provider.Batcher
	cfg BatchConfig
	log results.BatchLog
	// name is the batches' model in the log: the model's, or for a judge's
	// batches the judge, its scorer and the model judged.
	name string
	// judging, for a judge's batches, is what they judge.
	judging *judging
	sink    Sink
	items   map[string]*batchItem // by customID
	// inFlight are the batches submitted and not done, by key.
	inFlight map[string]*results.BatchRecord
	known    map[string]bool // provider ids of the model's batches
	// cancelled are the batches whose cancellation was asked for.
	cancelled map[string]bool
	// sync holds the samples to call at once (retryFailed sync, a deadline).
	sync []*batchItem
	// answered holds the samples whose earlier answers are scored again
	// (Answered), never submitted.
	answered []*batchItem
	// mu guards items and sync while results are taken in concurrently.
	mu sync.Mutex
}

// batchCustomID names a sample's request in a batch: its dataset, sample and
// attempt, and tag, a hash of the request itself (requestTag), so that a
// result for another request (another model's, another run's, asked of the
// same account) is told apart and refused. Unique in its batch, 64
// characters at most of letters, digits and _ (both providers accept that).
func batchCustomID(dsIndex, index, attempt int, tag string) string {
	return fmt.Sprintf("d%d_s%d_a%d_r%s", dsIndex, index, attempt, tag)
}

// parseBatchCustomID reads a custom id; tag is "" for one written before
// custom ids carried it (a batch in flight across an upgrade).
func parseBatchCustomID(id string) (dsIndex, index, attempt int, tag string, ok bool) {
	parts := strings.Split(id, "_")
	if len(parts) == 4 && strings.HasPrefix(parts[3], "r") && len(parts[3]) > 1 {
		tag, parts = parts[3][1:], parts[:3]
	}
	if len(parts) != 3 || !strings.HasPrefix(parts[0], "d") || !strings.HasPrefix(parts[1], "s") || !strings.HasPrefix(parts[2], "a") {
		return 0, 0, 0, "", false
	}
	var err1, err2, err3 error
	dsIndex, err1 = strconv.Atoi(parts[0][1:])
	index, err2 = strconv.Atoi(parts[1][1:])
	attempt, err3 = strconv.Atoi(parts[2][1:])
	return dsIndex, index, attempt, tag, err1 == nil && err2 == nil && err3 == nil
}

// requestTag identifies what a batch item asks: the model (its fingerprint
// and the batches' name) and the request (messages, tools, parameters). 12
// hex digits: an accidental match is one in 2^48.
func (r *batchRun) requestTag(it *batchItem) string {
	if it.tag == "" {
		req, _ := json.Marshal(it.req)
		h := sha256.Sum256([]byte(r.m.Fingerprint + "\n" + r.name + "\n" + string(req)))
		it.tag = hex.EncodeToString(h[:6])
	}
	return it.tag
}

// itemKey is a sample's key in batchRun.items, whatever its attempt.
func itemKey(dsIndex, index int) string { return strconv.Itoa(dsIndex) + "/" + strconv.Itoa(index) }

// runBatchModel runs a model's tasks through its provider's batch API. Its
// batches are recorded in the sink (a results.BatchLog) before and after each
// submission, so that a run stopped or killed at any point finds them again:
// their samples are never submitted twice while a submission of them is
// pending or answered. Stop leaves the batches in flight to the next run.
func (e *Engine) runBatchModel(ctx context.Context, fail context.CancelCauseFunc, m *modelRun, tasks []Task, sink Sink) error {
	log, ok := sink.(results.BatchLog)
	if !ok {
		return fmt.Errorf("model %s: batch mode needs a record store that keeps batches", m.Name)
	}
	batcher, ok := m.Provider.(provider.Batcher)
	if !ok {
		return fmt.Errorf("model %s: its provider has no batch API", m.Name)
	}
	r := newBatchRun(e, m, batcher, log, sink)
	if err := r.collect(tasks); err != nil {
		return err
	}
	if err := r.scoreAnswered(ctx); err != nil {
		return err
	}
	if err := r.adopt(ctx); err != nil {
		return err
	}
	return r.loop(ctx, fail)
}

func newBatchRun(e *Engine, m *modelRun, b provider.Batcher, log results.BatchLog, sink Sink) *batchRun {
	return &batchRun{e: e, m: m, b: b, cfg: *m.Batch, log: log, name: m.Name, sink: sink, items: map[string]*batchItem{},
		inFlight: map[string]*results.BatchRecord{}, known: map[string]bool{}, cancelled: map[string]bool{}}
}

// collect renders the samples that have no record yet; a sample that cannot
// be read or rendered is its error record at once.
func (r *batchRun) collect(tasks []Task) error {
	e, m := r.e, r.m
	for _, t := range tasks {
		ds := e.plan.Dataset(t.Dataset)
		dsIndex := slices.Index(e.plan.Datasets, ds)
		err := eachSample(ds, t.Start, t.End, func(s dataset.Sample) error {
			if r.sink.Done(m.Name, ds.Name, s.Index) {
				return nil
			}
			rec := &results.Record{ID: s.ID, Model: m.Name, Dataset: ds.Name, Scores: map[string]float64{}, Cost: m.cost(0)}
			if s.Err != nil {
				rec.Error, rec.ErrorKind = e.redact(s.Err.Error()), results.ErrorKindData
				return r.put(ds, &s, rec)
			}
			req, err := e.plan.Prompt.Request(&s)
			if err != nil {
				rec.Error, rec.ErrorKind = e.redact(fmt.Sprintf("rendering the prompt: %v", err)), results.ErrorKindPrompt
				return r.put(ds, &s, rec)
			}
			req.Model, req.Dataset = m.Name, ds.Name
			it := &batchItem{ds: ds, dsIndex: dsIndex, s: s, req: req}
			if a, ok := r.sink.(Answered); ok {
				if rec := a.Answered(m.Name, ds.Name, s.Index); rec != nil && rec.ID == s.ID {
					it.pending = rec
					r.answered = append(r.answered, it)
					return nil
				}
			}
			if e.opts.ScoreOnly {
				return nil // no answer to score: left unanswered
			}
			r.items[itemKey(dsIndex, s.Index)] = it
			return nil
		})
		if err != nil {
			return fmt.Errorf("dataset %s: %w", ds.Name, err)
		}
	}
	return nil
}

// scoreAnswered scores the earlier answers collect found (the scoring
// changed, or their judge had failed), as many at a time as the model's
// concurrency, calling judges only.
func (r *batchRun) scoreAnswered(ctx context.Context) error {
	e := r.e
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, r.m.Concurrency))
	for _, it := range r.answered {
		g.Go(func() error {
			rec := carried(it.pending)
			rec.Model, rec.Dataset = r.m.Name, it.ds.Name
			scored, err := e.score(gctx, rec, &it.s, it.req, it.pending.Output, it.pending.ToolCalls)
			if IsBudgetExceeded(err) {
				e.exhaust(err)
				return nil
			}
			if err != nil || scored == nil {
				return err // stopping, or the judge's quota ended
			}
			return r.put(it.ds, &it.s, scored)
		})
	}
	r.answered = nil
	return g.Wait()
}

// eachSample calls fn with the samples of ds from start to end (exclusive).
func eachSample(ds *Dataset, start, end int, fn func(dataset.Sample) error) error {
	rd, closer, err := ds.Open()
	if err != nil {
		return err
	}
	defer closer.Close()
	if start > 0 {
		if err := skip(rd, start); err != nil {
			return err
		}
	}
	for {
		s, err := rd.Next()
		if errors.Is(err, io.EOF) || (err == nil && s.Index >= end) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(s); err != nil {
			return err
		}
	}
}

// put stores a finished record (for a judge's batch, the judged model's).
func (r *batchRun) put(ds *Dataset, s *dataset.Sample, rec *results.Record) error {
	model := r.m.Name
	if r.judging != nil {
		model = r.judging.subject.Name
	}
	r.e.zeroFailed(rec)
	r.e.stamp(rec, s, time.Time{})
	if err := r.sink.Put(model, ds.Name, s.Index, rec); err != nil {
		return fmt.Errorf("saving the result of %s on %s sample %s: %w", model, ds.Name, s.ID, err)
	}
	if r.judging == nil {
		// A judged sample was counted when its answer came.
		if o := r.e.opts.Observer; o != nil {
			o.SampleFinished(model, ds.Name, rec)
		}
		r.e.opts.Metrics.Sample(model, ds.Name, errorKind(rec))
	}
	return nil
}

// adopt takes up the batches an earlier run recorded: those submitted are
// followed, and one only intended is looked for at the provider (the run may
// have been killed after submitting it) and submitted again only if it is
// not there.
func (r *batchRun) adopt(ctx context.Context) error {
	recs, err := r.log.Batches(r.name)
	if err != nil {
		return fmt.Errorf("reading the model's batches: %w", err)
	}
	for _, b := range recs {
		if b.ID != "" {
			r.known[b.ID] = true
		}
	}
	failedIn := map[*batchItem]string{}
	for i := range recs {
		b := recs[i]
		if b.State == results.BatchDone {
			// Its samples still without a record failed in it: a run
			// stopped before they were retried. They go on from their next
			// attempt, as retryFailed says (below), so that maxAttempts
			// bounds their attempts across runs.
			dsIndex := r.datasetIndex(b.Dataset)
			for _, idx := range b.Indexes {
				if it := r.items[itemKey(dsIndex, idx)]; it != nil && it.attempt <= b.Attempt {
					it.attempt = b.Attempt + 1
					failedIn[it] = b.ID
				}
			}
			continue
		}
		dsIndex := r.datasetIndex(b.Dataset)
		var pending []*batchItem
		for _, idx := range b.Indexes {
			if it := r.items[itemKey(dsIndex, idx)]; it != nil {
				it.attempt = b.Attempt
				pending = append(pending, it)
			}
		}
		if len(pending) == 0 {
			// Its samples all have records: nothing to wait for.
			b.State = results.BatchDone
			if err := r.log.PutBatch(b); err != nil {
				return err
			}
			continue
		}
		if b.State == results.BatchIntended {
			found, err := r.find(ctx, &b)
			if err != nil {
				return err
			}
			if !found {
				// Never submitted: it is submitted (again) with the others.
				continue
			}
		}
		r.e.log.Info("Following a batch submitted earlier", "model", r.m.Name, "batch", b.ID, "pending", len(pending))
		for _, it := range pending {
			// Its worst case, which the earlier run held, is held again.
			it.hold, _ = r.e.holdBatch(r.m, it, true)
			delete(failedIn, it)
		}
		r.inFlight[b.Key] = &b
	}
	return r.retryFailed(failedIn)
}

// retryFailed goes on with samples that failed in a batch of an earlier run
// and have no record: called at once (retryFailed sync), in a new batch while
// attempts are left (batch), else errors.
func (r *batchRun) retryFailed(failedIn map[*batchItem]string) error {
	for _, it := range r.sorted() {
		id, ok := failedIn[it]
		if !ok {
			continue
		}
		switch {
		case r.cfg.Retry == "sync":
			r.sync = append(r.sync, it)
			continue
		case r.cfg.Retry == "batch" && it.attempt < max(1, r.e.plan.Retry.MaxAttempts):
			continue
		}
		delete(r.items, itemKey(it.dsIndex, it.s.Index))
		err := fmt.Errorf("batch %s did not answer it (in %d batches)", id, it.attempt)
		if r.judging != nil {
			if err := r.judgeFailed(it, err); err != nil {
				return err
			}
			continue
		}
		rec := &results.Record{ID: it.s.ID, Model: r.m.Name, Dataset: it.ds.Name, Scores: map[string]float64{}, Cost: r.m.cost(0),
			Attempts: it.attempt, Batch: id, ErrorKind: results.ErrorKindCall, Error: r.e.redact(err.Error()), Input: r.e.itemInput(it)}
		if err := r.put(it.ds, &it.s, rec); err != nil {
			return err
		}
	}
	return nil
}

// find looks for an intended batch at the provider and, found, claims it (a
// submitted record). Claims are made one model at a time, and a batch another
// model of the run claimed is not taken: two models submitting batches of one
// size at once must not follow one batch (Anthropic's batches keep no tag to
// tell them apart; a batch taken anyway is refused when its results, whose
// custom ids name their requests, are read).
func (r *batchRun) find(ctx context.Context, b *results.BatchRecord) (bool, error) {
	r.e.claimMu.Lock()
	defer r.e.claimMu.Unlock()
	all, err := r.log.Batches("")
	if err != nil {
		return false, fmt.Errorf("reading the run's batches: %w", err)
	}
	claimed := map[string]bool{}
	for _, x := range all {
		if x.ID != "" {
			claimed[x.ID] = true
		}
	}
	id, err := r.b.FindBatch(ctx, b.Key, b.Since.Add(-provider.BatchClockSkew), len(b.Indexes), func(id string) bool { return r.known[id] || claimed[id] })
	if err != nil {
		return false, fmt.Errorf("model %s: looking for batch %s: %w", r.m.Name, b.Key, err)
	}
	if id == "" {
		return false, nil
	}
	r.e.log.Info("Found a batch submitted before the run stopped", "model", r.m.Name, "batch", id, "requests", len(b.Indexes))
	b.ID, b.State = id, results.BatchSubmitted
	r.known[id] = true
	return true, r.log.PutBatch(*b)
}

// datasetIndex is a dataset's position in the plan, as custom ids name it.
func (r *batchRun) datasetIndex(name string) int {
	return slices.IndexFunc(r.e.plan.Datasets, func(d *Dataset) bool { return d.Name == name })
}

// covered reports the samples that a batch in flight holds.
func (r *batchRun) covered() map[string]bool {
	out := map[string]bool{}
	for _, b := range r.inFlight {
		dsIndex := r.datasetIndex(b.Dataset)
		for _, idx := range b.Indexes {
			out[itemKey(dsIndex, idx)] = true
		}
	}
	return out
}

// loop submits batches while there is room, follows them, and calls at once
// what must be, until every sample has its record or the engine stops.
func (r *batchRun) loop(ctx context.Context, fail context.CancelCauseFunc) error {
	e := r.e
	for {
		if e.stopping(ctx) {
			return nil
		}
		submitErr := r.submit(ctx)
		switch {
		case submitErr == nil:
		case IsBudgetExceeded(submitErr):
			if len(r.inFlight) > 0 || len(r.sync) > 0 {
				break // their results may leave room
			}
			if !e.opts.Ledger.Waits() {
				e.exhaust(submitErr)
				return nil
			}
			// A shard's allowance may be raised: look again after a wait.
			if err := e.sleep(ctx, r.cfg.PollInterval); err != nil {
				return nil //nolint:nilerr // stopping
			}
			continue
		case ctx.Err() != nil || e.stopping(ctx):
			return nil //nolint:nilerr // stopping: the batches are left to the next run
		default:
			if class, _ := retry.Classify(submitErr); class == retry.Final {
				return submitErr
			}
			// Throttled or failed for now: submitted again after a wait.
			e.log.Error(submitErr, "Failed to submit a batch; trying again", "model", r.m.Name)
			if len(r.inFlight) == 0 {
				if err := e.sleep(ctx, r.cfg.PollInterval); err != nil {
					return nil //nolint:nilerr // stopping
				}
				continue
			}
		}
		if len(r.sync) > 0 {
			if err := r.callAtOnce(ctx, fail); err != nil {
				return err
			}
			continue
		}
		e.opts.Metrics.Batches(r.m.Name, len(r.inFlight))
		if len(r.items) == 0 && len(r.inFlight) == 0 {
			return nil
		}
		if len(r.inFlight) > 0 {
			if err := e.sleep(ctx, r.cfg.PollInterval); err != nil {
				if errors.Is(err, errStopping) || ctx.Err() != nil {
					return nil //nolint:nilerr // stopping
				}
				return err
			}
			if err := r.poll(ctx); err != nil {
				if ctx.Err() != nil || e.stopping(ctx) {
					return nil //nolint:nilerr // stopping
				}
				// A provider error while following: tried again next time.
				e.log.Error(err, "Failed to follow a batch; trying again", "model", r.m.Name)
			}
		}
	}
}

// submit submits the samples no batch holds, a batch at a time, while there
// is room in flight.
func (r *batchRun) submit(ctx context.Context) error {
	e, m := r.e, r.m
	maxReqs, maxBytes := r.b.BatchLimits()
	if r.cfg.MaxRequests > 0 {
		maxReqs = min(maxReqs, r.cfg.MaxRequests)
	}
	maxBytes = maxBytes * 95 / 100 // the encoding's framing
	covered := r.covered()
	var exhausted error
	for len(r.inFlight) < max(1, r.cfg.MaxInFlight) {
		// The next batch: one dataset and attempt at a time, in sample order.
		var first *batchItem
		for _, it := range r.sorted() {
			if !covered[itemKey(it.dsIndex, it.s.Index)] && !slices.Contains(r.sync, it) {
				first = it
				break
			}
		}
		if first == nil {
			return exhausted
		}
		var group []*batchItem
		var entries [][]byte
		size := 0
		for _, it := range r.sorted() {
			if covered[itemKey(it.dsIndex, it.s.Index)] || it.ds != first.ds || it.attempt != first.attempt || slices.Contains(r.sync, it) {
				continue
			}
			entry, err := r.b.EncodeBatchRequest(batchCustomID(it.dsIndex, it.s.Index, it.attempt, r.requestTag(it)), it.req)
			if err != nil {
				return fmt.Errorf("model %s: encoding sample %s: %w", m.Name, it.s.ID, err)
			}
			if len(group) >= maxReqs || (len(group) > 0 && size+len(entry)+1 > maxBytes) {
				break
			}
			hold, err := e.holdBatch(m, it, false)
			if err != nil {
				exhausted = err
				break
			}
			it.hold = hold
			group = append(group, it)
			entries = append(entries, entry)
			size += len(entry) + 1
		}
		if len(group) == 0 {
			return exhausted
		}
		if err := r.submitGroup(ctx, group, entries); err != nil {
			for _, it := range group {
				it.hold.Settle(spend.Totals{})
				it.hold = nil
			}
			return err
		}
		for _, it := range group {
			covered[itemKey(it.dsIndex, it.s.Index)] = true
		}
		if exhausted != nil {
			return exhausted
		}
	}
	return nil
}

// sorted are the waiting samples in dataset and sample order.
func (r *batchRun) sorted() []*batchItem {
	out := make([]*batchItem, 0, len(r.items))
	for _, it := range r.items {
		out = append(out, it)
	}
	slices.SortFunc(out, func(a, b *batchItem) int {
		if a.dsIndex != b.dsIndex {
			return a.dsIndex - b.dsIndex
		}
		return a.s.Index - b.s.Index
	})
	return out
}

// submitGroup records a batch as intended, submits it and records its id.
func (r *batchRun) submitGroup(ctx context.Context, group []*batchItem, entries [][]byte) error {
	e, m := r.e, r.m
	idx := make(results.Indexes, len(group))
	for i, it := range group {
		idx[i] = it.s.Index
	}
	rec := results.BatchRecord{Model: r.name, Dataset: group[0].ds.Name, Attempt: group[0].attempt, Indexes: idx,
		Since: e.clock.Now(), State: results.BatchIntended}
	rec.Key = batchKey(m.Fingerprint, rec)
	if err := r.log.PutBatch(rec); err != nil {
		return fmt.Errorf("recording a batch: %w", err)
	}
	id, err := r.b.SubmitBatch(ctx, rec.Key, entries)
	if err != nil {
		// The provider may have made it before the answer was lost (a
		// connection dropped, a timeout): look for it before anything is
		// submitted again. Recorded as intended, the next run looks too.
		if class, _ := retry.Classify(err); class != retry.Final && ctx.Err() == nil {
			if found, ferr := r.find(ctx, &rec); ferr == nil && found {
				r.inFlight[rec.Key] = &rec
				return nil
			}
		}
		return fmt.Errorf("model %s: submitting a batch of %d: %w", m.Name, len(group), err)
	}
	rec.ID, rec.State = id, results.BatchSubmitted
	r.known[id] = true
	if err := r.log.PutBatch(rec); err != nil {
		return fmt.Errorf("recording batch %s: %w", id, err)
	}
	r.inFlight[rec.Key] = &rec
	e.log.Info("Submitted a batch", "model", m.Name, "dataset", rec.Dataset, "batch", id, "requests", len(group), "attempt", rec.Attempt)
	return nil
}

// batchKey identifies a submission by what it holds.
func batchKey(fingerprint string, b results.BatchRecord) string {
	h := sha256.Sum256([]byte(strings.Join([]string{fingerprint, b.Model, b.Dataset, strconv.Itoa(b.Attempt), b.Indexes.String()}, "\n")))
	return "proctor-" + hex.EncodeToString(h[:12])
}

// poll looks at the batches in flight; those ended are read, their answers
// stored, their failures retried as configured. A batch past its deadline is
// cancelled.
func (r *batchRun) poll(ctx context.Context) error {
	keys := make([]string, 0, len(r.inFlight))
	for k := range r.inFlight {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b := r.inFlight[k]
		st, err := r.b.Batch(ctx, b.ID)
		if h, ok := provider.AsHTTPError(err); ok && h.StatusCode == 404 {
			// Gone from the provider (deleted): nothing of it can be
			// answered any more, so its samples go in another batch.
			r.e.log.Info("A batch is gone from the provider; its samples are submitted again", "model", r.m.Name, "batch", b.ID)
			if err := r.dropBatch(b); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("batch %s: %w", b.ID, err)
		}
		if !st.Ended {
			if d := r.cfg.Deadline; d > 0 && r.e.clock.Since(b.Since) > d && !r.cancelled[b.ID] {
				// Asked once: a cancellation takes the provider a while.
				r.e.log.Info("Cancelling a batch past its deadline; its unanswered samples are called at once", "model", r.m.Name, "batch", b.ID,
					"deadline", d.String())
				if err := r.b.CancelBatch(ctx, b.ID); err != nil {
					return fmt.Errorf("cancelling batch %s: %w", b.ID, err)
				}
				r.cancelled[b.ID] = true
			}
			continue
		}
		if err := r.finish(ctx, b, st); err != nil {
			return err
		}
	}
	return nil
}

// errForeignBatch says a batch's results answer requests this model did not
// ask.
var errForeignBatch = errors.New("the batch's custom ids name other requests (another model's, or another run's)")

// dropBatch gives up a batch none of whose results can be used (gone from
// the provider, or another's): its samples go in another batch, as their
// next attempt (the custom ids of the next batch are new).
func (r *batchRun) dropBatch(b *results.BatchRecord) error {
	dsIndex := r.datasetIndex(b.Dataset)
	for _, idx := range b.Indexes {
		if it := r.items[itemKey(dsIndex, idx)]; it != nil && it.attempt == b.Attempt {
			it.hold.Settle(spend.Totals{})
			it.hold = nil
			it.attempt++
		}
	}
	b.State = results.BatchDone
	delete(r.inFlight, b.Key)
	return r.log.PutBatch(*b)
}

// finish reads an ended batch's results into records.
func (r *batchRun) finish(ctx context.Context, b *results.BatchRecord, st provider.BatchState) error {
	e, m := r.e, r.m
	e.opts.Metrics.BatchEnded(m.Name)
	dsIndex := r.datasetIndex(b.Dataset)
	seen := map[string]bool{}
	turnaround := e.clock.Since(b.Since)
	if !st.Created.IsZero() {
		turnaround = e.clock.Since(st.Created)
	}
	type outcome struct {
		it  *batchItem
		res provider.BatchResult
	}
	var outcomes []outcome
	answered := map[string]bool{} // by item key
	foreign := 0
	err := r.b.BatchResults(ctx, b.ID, func(res provider.BatchResult) error {
		ds, idx, attempt, tag, ok := parseBatchCustomID(res.CustomID)
		if !ok || ds != dsIndex || attempt != b.Attempt {
			foreign++ // not one of this batch's requests
			return nil
		}
		it := r.items[itemKey(ds, idx)]
		if it == nil || it.attempt != b.Attempt || seen[res.CustomID] {
			return nil // recorded already
		}
		if tag != "" && tag != r.requestTag(it) {
			// Another model's or run's answer to its own sample: never ours.
			foreign++
			return nil
		}
		seen[res.CustomID] = true
		answered[itemKey(ds, idx)] = true
		outcomes = append(outcomes, outcome{it, res})
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading batch %s: %w", b.ID, err)
	}
	if foreign > 0 && len(outcomes) == 0 {
		// A batch taken up after a crash that holds other requests: its
		// results are refused, and its samples go in another batch (the
		// batch this one was taken for may be paid for and unread).
		e.log.Error(errForeignBatch, "Refused the results of a batch that is not this model's: its samples are submitted again",
			"model", m.Name, "batch", b.ID, "results", foreign)
		return r.dropBatch(b)
	}
	if foreign > 0 {
		e.log.Error(errForeignBatch, "Refused results of a batch that answer other requests", "model", m.Name, "batch", b.ID, "results", foreign)
	}
	// A request the provider gave no result for failed with the batch.
	for _, idx := range b.Indexes {
		it := r.items[itemKey(dsIndex, idx)]
		if it == nil || answered[itemKey(dsIndex, idx)] || it.attempt != b.Attempt {
			continue
		}
		why := errors.New("the batch ended without a result for it")
		if st.Failure != "" {
			why = errors.New(st.Failure)
		}
		outcomes = append(outcomes, outcome{it, provider.BatchResult{Err: why}})
	}
	// Scored with the model's concurrency: a judge's calls are calls.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, m.concurrency())
	for _, o := range outcomes {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := r.result(ctx, b, o.it, o.res, turnaround); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if e.stopping(ctx) {
		return nil // some were not scored: the batch is read again next time
	}
	b.State = results.BatchDone
	delete(r.inFlight, b.Key)
	if err := r.log.PutBatch(*b); err != nil {
		return fmt.Errorf("recording batch %s: %w", b.ID, err)
	}
	e.log.Info("Batch ended", "model", m.Name, "batch", b.ID, "status", st.Status, "succeeded", st.Succeeded, "failed", st.Failed)
	return nil
}

// result turns one request's result into its record, or retries it.
func (r *batchRun) result(ctx context.Context, b *results.BatchRecord, it *batchItem, res provider.BatchResult, turnaround time.Duration) error {
	e, m := r.e, r.m
	if res.Err != nil || res.Response == nil {
		if res.Err == nil {
			res.Err = errors.New("no answer")
		}
		it.hold.Settle(spend.Totals{})
		it.hold = nil
		retry := r.cfg.Retry
		if res.Canceled && r.cfg.Deadline > 0 {
			retry = "sync" // past its deadline: called at once
		}
		r.mu.Lock()
		it.attempt++
		switch {
		case retry == "sync":
			r.sync = append(r.sync, it)
			r.mu.Unlock()
			return nil
		case retry == "batch" && it.attempt < max(1, e.plan.Retry.MaxAttempts):
			r.mu.Unlock()
			return nil // in a new batch
		}
		delete(r.items, itemKey(it.dsIndex, it.s.Index))
		r.mu.Unlock()
		if r.judging != nil {
			return r.judgeFailed(it, fmt.Errorf("batch %s: %w (in %d batches)", b.ID, res.Err, it.attempt))
		}
		rec := &results.Record{ID: it.s.ID, Model: m.Name, Dataset: it.ds.Name, Scores: map[string]float64{}, Cost: m.cost(0),
			Attempts: it.attempt, Batch: b.ID, ErrorKind: results.ErrorKindCall, Input: e.itemInput(it),
			Error: e.redact(fmt.Sprintf("batch %s: %v (in %d batches)", b.ID, res.Err, it.attempt))}
		_, span := e.startBatchSample(ctx, m, it.ds, &it.s, b.ID, e.clock.Now().Add(-turnaround), it.attempt, nil, res.Err, 0)
		err := r.put(it.ds, &it.s, rec)
		endSample(span, rec)
		return err
	}
	resp := res.Response
	charge := spend.Totals{Tokens: resp.Usage.InputTokens + resp.Usage.OutputTokens}
	if m.Price != nil {
		charge.Cost = m.Price.Of(resp.Usage, true)
	}
	if resp.Usage.InputTokens == 0 && resp.Usage.OutputTokens == 0 {
		charge = e.worstBatch(m, it)
	}
	it.hold.Settle(charge)
	it.hold = nil
	if r.judging != nil {
		return r.judged(ctx, it, resp, charge.Cost)
	}
	rec := &results.Record{ID: it.s.ID, Model: m.Name, Dataset: it.ds.Name, Scores: map[string]float64{},
		Attempts: it.attempt + 1, LatencyMillis: turnaround.Milliseconds(), Batch: b.ID,
		Output: e.redact(resp.Text), ToolCalls: e.redactToolCalls(resp.ToolCalls), MaxTokensReached: resp.MaxTokensReached(),
		InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens, Cost: m.cost(charge.Cost), Input: e.itemInput(it)}
	if resp.Truncated {
		rec.OutputTruncated, rec.OutputBytes = true, resp.FullBytes
	}
	sctx, span := e.startBatchSample(ctx, m, it.ds, &it.s, b.ID, e.clock.Now().Add(-turnaround), it.attempt+1, resp, nil, charge.Cost.Dollars())
	var kept *results.Record
	defer func() { endSample(span, kept) }()
	scored, err := e.score(sctx, rec, &it.s, it.req, resp.Text, resp.ToolCalls)
	if IsBudgetExceeded(err) {
		e.exhaust(err)
		return nil
	}
	if err != nil || scored == nil {
		// Stopping, or the judge's quota ended: the answer is not kept, and
		// its sample is taken up again (its batch read again) next time.
		return err
	}
	r.mu.Lock()
	delete(r.items, itemKey(it.dsIndex, it.s.Index))
	r.mu.Unlock()
	if err := r.put(it.ds, &it.s, scored); err != nil {
		return err
	}
	kept = scored
	return nil
}

// callAtOnce calls the samples a batch could not answer, as calls are made,
// with the model's concurrency.
func (r *batchRun) callAtOnce(ctx context.Context, fail context.CancelCauseFunc) error {
	e, m := r.e, r.m
	todo := r.sync
	r.sync = nil
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, m.concurrency())
	for _, it := range todo {
		if e.stopping(ctx) {
			break
		}
		sem <- struct{}{}
		if r.judging != nil {
			wg.Go(func() {
				defer func() { <-sem }()
				if err := r.judgeAtOnce(ctx, it); err != nil {
					mu.Lock()
					defer mu.Unlock()
					if IsBudgetExceeded(err) {
						e.exhaust(err)
					} else if firstErr == nil {
						firstErr = err
					}
				}
			})
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			sctx, span := e.startSample(ctx, m, it.ds, &it.s)
			rec, err := e.evaluate(sctx, m, it.ds, &it.s, nil, &slot{of: 1})
			defer func() { endSample(span, rec) }()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case IsBudgetExceeded(err):
				e.exhaust(err)
			case err != nil:
				if firstErr == nil {
					firstErr = err
				}
			case rec != nil:
				rec.Attempts += it.attempt
				r.mu.Lock()
				delete(r.items, itemKey(it.dsIndex, it.s.Index))
				r.mu.Unlock()
				if err := r.put(it.ds, &it.s, rec); err != nil {
					fail(err)
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// holdBatch reserves a batched request's worst case at the batch price, if
// the run has a budget; an *spend.ExceededError when it has no room now
// (force holds it anyway: a batch already submitted).
func (e *Engine) holdBatch(m *modelRun, it *batchItem, force bool) (*spend.Hold, error) {
	l := e.opts.Ledger
	if l == nil {
		return nil, nil
	}
	worst := e.worstBatch(m, it)
	if force {
		return l.Force(worst), nil
	}
	return l.TryReserve(worst)
}

// worstBatch is a batched request's worst case, at the batch price.
func (e *Engine) worstBatch(m *modelRun, it *batchItem) spend.Totals {
	in, out := m.est.cost(EstimateInput(it.req)).InputTokens, e.outputBound(m)
	t := spend.Totals{Tokens: in + out}
	if m.Price != nil {
		t.Cost = m.Price.Worst(in, out, true)
	}
	return t
}

// itemInput is what a batch item's record says its model was sent.
func (e *Engine) itemInput(it *batchItem) []provider.Message {
	if it.req == nil {
		return nil
	}
	return e.inputOf(it.req)
}
