package kube

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/spend"
)

var _ results.Log = (*Store)(nil)

// Store is a shard's record log (results.Log) backed by its ConfigMaps.
type Store struct {
	c     client.Client
	ns    string
	head  string
	shard cluster.Shard
	ev    *v1alpha1.Evaluation

	mu       sync.Mutex
	obj      *corev1.ConfigMap
	done     []bool // by position - shard.Start
	progress cluster.ShardProgress
	pending  [][]byte // journal lines not yet sealed
	raw      int      // bytes in pending
	wake     chan struct{}
	// budget bounds progress.Stored; 0 means unbounded.
	budget int64
	// batches are the shard's batches (results.BatchLog), newest record of
	// each key.
	batches []results.BatchRecord
	// awaiting are the records whose judging waits for a judge's batch, by
	// sample position: done, until a later record replaces them.
	awaiting map[int]*results.Record
	// carried is what the earlier answers given to be scored again cost,
	// by sample position (Carry).
	carried map[int]spend.Totals
	// inStore: the shard seals its chunks into the results store, through
	// the presigned URLs of uploads (cluster.Uploads), read from its
	// uploads Secret when needed.
	inStore bool
	// succeeded: the head said the shard had succeeded when it was opened.
	succeeded bool
	uploads   *cluster.Uploads
	hc        *http.Client
	now       func() time.Time
}

var _ results.BatchLog = (*Store)(nil)

// Carry says that sample index's next record, if Rescored, carries an
// earlier run's answer that cost t: that run paid for it, this one does
// not count it again.
func (s *Store) Carry(index int, t spend.Totals) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.carried == nil {
		s.carried = map[int]spend.Totals{}
	}
	s.carried[index] = t
}

// Batches implements results.BatchLog.
func (s *Store) Batches(model string) ([]results.BatchRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []results.BatchRecord
	for _, b := range s.batches {
		if model == "" || b.Model == model {
			out = append(out, b)
		}
	}
	return out, nil
}

// PutBatch implements results.BatchLog: the head is written at once, so
// that a batch submitted outlives the pod.
func (s *Store) PutBatch(b results.BatchRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.IndexFunc(s.batches, func(x results.BatchRecord) bool { return x.Key == b.Key }); i >= 0 {
		s.batches[i] = b
	} else {
		s.batches = append(s.batches, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.flush(ctx, false)
}

// OpenStore opens a shard's head, which the controller made, and loads what an
// earlier pod of the shard left in it. A head that the Evaluation does not
// control is refused (a *ForeignError).
func OpenStore(ctx context.Context, c client.Client, ev *v1alpha1.Evaluation, run string, shard cluster.Shard, pod string) (*Store, error) {
	s := &Store{
		c:        c,
		ns:       ev.Namespace,
		head:     cluster.HeadName(ev.Name, run, shard.Model, shard.Index),
		shard:    shard,
		ev:       ev,
		done:     make([]bool, shard.End-shard.Start),
		progress: cluster.ShardProgress{State: cluster.StateRunning, Total: shard.End - shard.Start, Pod: pod},
		wake:     make(chan struct{}, 1),
		hc:       &http.Client{Timeout: 2 * time.Minute},
		now:      time.Now,
	}
	var cm corev1.ConfigMap
	if err := GetConfigMap(ctx, c, ev, s.head, &cm); err != nil {
		return nil, fmt.Errorf("reading shard head %s: %w", s.head, err)
	}
	if err := s.load(&cm); err != nil {
		return nil, fmt.Errorf("shard head %s: %w", s.head, err)
	}
	if s.succeeded = s.progress.State == cluster.StateSucceeded; s.succeeded {
		return s, nil // nothing more is written to it
	}
	if err := s.loadAwaiting(ctx, cm.Data[cluster.KeyAwaiting]); err != nil {
		return nil, fmt.Errorf("shard head %s: %w", s.head, err)
	}
	s.progress.State, s.progress.Pod, s.progress.Total = cluster.StateRunning, pod, shard.End-shard.Start
	return s, nil
}

// Succeeded reports whether the head said, when opened, that the shard had
// succeeded: a pod of its worker finished it, and nothing more is to be
// written to it.
func (s *Store) Succeeded() bool { return s.succeeded }

// load restores the done set, progress and pending records from a head.
func (s *Store) load(cm *corev1.ConfigMap) error {
	s.obj = cm
	s.inStore = cluster.InStore(cm.Annotations)
	if p, ok := cluster.ParseProgress(cm.Annotations); ok {
		s.progress = p
	}
	batches, err := cluster.ParseBatches(cm.Annotations)
	if err != nil {
		return err
	}
	s.batches = batches
	if err := parseRanges(cm.Data[cluster.KeyDone], s.shard.Start, s.done); err != nil {
		return err
	}
	if gz := cm.BinaryData[cluster.KeyPending]; len(gz) > 0 {
		lines, err := results.GunzipLines(gz)
		if err != nil {
			return fmt.Errorf("pending records: %w", err)
		}
		s.pending = lines
		for _, l := range lines {
			s.raw += len(l)
		}
	}
	return nil
}

// loadAwaiting finds again the records that awaited judging (the head's
// KeyAwaiting) in the shard's chunks and pending records: the newest record
// of each.
func (s *Store) loadAwaiting(ctx context.Context, ranges string) error {
	set := make([]bool, len(s.done))
	if err := parseRanges(ranges, s.shard.Start, set); err != nil || ranges == "" {
		return err
	}
	latest := map[int]json.RawMessage{}
	keep := func(lines []results.Line) {
		for _, l := range lines {
			if i := l.Index - s.shard.Start; i >= 0 && i < len(set) && set[i] {
				latest[l.Index] = l.Record
			}
		}
	}
	for k := range s.progress.Chunks {
		lines, err := s.readChunk(ctx, k)
		if err != nil {
			return fmt.Errorf("reading chunk %d for the records awaiting judging: %w", k, err)
		}
		keep(lines)
	}
	for _, b := range s.pending {
		l, err := results.ParseLine(b)
		if err != nil {
			return fmt.Errorf("pending records: %w", err)
		}
		keep([]results.Line{l})
	}
	for i, raw := range latest {
		var rec results.Record
		if err := json.Unmarshal(raw, &rec); err != nil {
			return fmt.Errorf("the record of sample %d: %w", i, err)
		}
		if len(rec.JudgePending) > 0 {
			s.await(i, &rec)
		}
	}
	return nil
}

func (s *Store) await(index int, rec *results.Record) {
	if s.awaiting == nil {
		s.awaiting = map[int]*results.Record{}
	}
	c := *rec
	s.awaiting[index] = &c
}

// Awaiting returns the records whose judging waits for a judge's batch, by
// sample position.
func (s *Store) Awaiting(_, _ string) map[int]*results.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int]*results.Record, len(s.awaiting))
	for i, r := range s.awaiting {
		c := *r
		out[i] = &c
	}
	return out
}

// Done implements results.Log.
func (s *Store) Done(_, _ string, index int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := index - s.shard.Start
	return i >= 0 && i < len(s.done) && s.done[i]
}

// SetStorageBudget bounds the bytes of records the shard stores (its share of
// the run's storage budget); 0 means unbounded. Once a record would pass it,
// records are stored without their output.
func (s *Store) SetStorageBudget(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.budget = n
}

// Put implements results.Log: the record is kept in memory and written by the next
// Flush (soon, if a lot accumulates). An output longer than MaxOutputBytes is cut,
// and once the shard's storage budget is used up outputs are not stored at all;
// either way the record says so, and keeps its scores.
func (s *Store) Put(_, _ string, index int, rec *results.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := index - s.shard.Start
	if i < 0 || i >= len(s.done) {
		return fmt.Errorf("sample %d is outside shard [%d, %d)", index, s.shard.Start, s.shard.End)
	}
	whole := len(rec.Output)
	if rec.OutputTruncated {
		whole = rec.OutputBytes // the engine cut it already (an agent's cap)
	}
	limit := cluster.MaxOutputBytes
	if s.inStore {
		limit = cluster.MaxStoreOutputBytes
	}
	cut := len(rec.Output) > limit
	if cut {
		rec.Output = results.CutUTF8(rec.Output, limit)
		rec.OutputTruncated, rec.OutputBytes = true, whole
	}
	inputLimit := cluster.MaxInputBytes
	if s.inStore {
		inputLimit = cluster.MaxStoreOutputBytes
	}
	cutInput(rec, inputLimit)
	line, err := recordLine(index, rec)
	if err != nil {
		return err
	}
	dropped := false
	// A record awaiting its judge keeps its answer, which the judge is to see.
	// The storage budget bounds what etcd holds: records in the results
	// store are not cut.
	if !s.inStore && s.budget > 0 && s.progress.Stored+int64(len(line)) > s.budget && (rec.Output != "" || len(rec.Input) > 0 || len(rec.ProxiedCalls) > 0) && len(rec.JudgePending) == 0 {
		rec.Output, rec.OutputTruncated, rec.OutputBytes = "", true, whole
		rec.Input, rec.InputTruncated = nil, rec.InputTruncated || len(rec.Input) > 0
		rec.ProxiedCalls = nil // AgentCalls still counts them
		dropped = true
		if line, err = recordLine(index, rec); err != nil {
			return err
		}
	}
	s.progress.Stored += int64(len(line))
	spent := results.Spent(rec)
	if c, ok := s.carried[index]; ok && rec.Rescored {
		// An earlier run's answer, scored again: that run paid for it.
		spent = spent.Sub(c)
	}
	delete(s.carried, index)
	first := !s.done[i]
	s.done[i] = true
	prev := s.awaiting[index]
	if prev != nil {
		// Judged: it replaces the record that awaited its verdicts, whose
		// calls it carries again.
		delete(s.awaiting, index)
		spent = spent.Sub(results.Spent(prev))
		s.progress.Tokens.Input -= prev.InputTokens
		s.progress.Tokens.Output -= prev.OutputTokens
	}
	switch {
	case len(rec.JudgePending) > 0:
		// Answered and paid for, not finished: kept until its verdicts come.
		s.await(index, rec)
		s.progress.Tokens.Input += rec.InputTokens
		s.progress.Tokens.Output += rec.OutputTokens
	case first || prev != nil:
		s.progress.Done++
		switch {
		case dropped:
			s.progress.Dropped++
		case cut:
			s.progress.Cut++
		}
		s.count(rec)
	}
	// Every record was paid for, also one that replaces another.
	s.progress.Spent = s.progress.Spent.Add(spent)
	s.pending = append(s.pending, line)
	s.raw += len(line)
	if s.raw >= cluster.FlushPendingRaw {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// count adds a finished record's outcome to the progress.
func (s *Store) count(rec *results.Record) {
	if rec.Error != "" {
		s.progress.Errored++
	}
	// A failed sample's scores are 0, but for the scorers that did score it.
	if s.progress.Scores == nil {
		s.progress.Scores = map[string]float64{}
	}
	for k, v := range rec.Scores {
		s.progress.Scores[k] += v
	}
	s.progress.Tokens.Input += rec.InputTokens
	s.progress.Tokens.Output += rec.OutputTokens
}

// recordLine is a record as the shard's ConfigMaps hold it: a record log line.
func recordLine(index int, rec *results.Record) ([]byte, error) {
	return results.AppendLine(nil, index, rec)
}

// cutInput cuts the text of a record's input messages to limit bytes in
// all, in order: the system prompt and first messages are kept whole.
func cutInput(rec *results.Record, limit int) {
	left := limit
	for i := range rec.Input {
		c := rec.Input[i].Content
		if len(c) > left {
			rec.Input[i].Content = results.CutUTF8(c, left)
			rec.InputTruncated = true
		}
		left = max(0, left-len(rec.Input[i].Content))
	}
}

// Wake is signalled when enough records accumulated to flush early.
func (s *Store) Wake() <-chan struct{} { return s.wake }

// SetAttempts records how many pods began the shard and did not drain it
// (cluster.ShardProgress.Attempts), for the next flush.
func (s *Store) SetAttempts(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.progress.Attempts = n
}

// SetBudget records the budget version the runner applied (acknowledged with the
// next flush).
func (s *Store) SetBudget(version int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.progress.Budget = version
}

// SetEndpoints records the endpoint budgets the shard applied, and what it
// sent through them, for the next flush.
func (s *Store) SetEndpoints(acks map[string]cluster.EndpointAck, usage map[string]cluster.Usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.progress.Endpoints, s.progress.Usage = acks, usage
}

// SetProvider records what the providers' rate-limit headers last said, for
// the next flush.
func (s *Store) SetProvider(seen map[string]cluster.ProviderSeen) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.progress.Provider = seen
}

// SetLedger records the runner's account against its allowance, for the
// next flush.
func (s *Store) SetLedger(r *cluster.LedgerReport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.progress.Ledger = r
}

// SetThrottled records which models are being rate limited, for the next flush.
func (s *Store) SetThrottled(t map[string]cluster.Throttle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.progress.Throttled = t
}

// Progress returns the shard's progress so far.
func (s *Store) Progress() cluster.ShardProgress {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.progress
}

// ErrNoSlot is returned by Flush when records wait for chunk slots that the
// controller has not granted yet, and the head cannot hold them meanwhile.
var ErrNoSlot = errors.New("records are waiting for chunk slots from the controller")

// Flush writes the head: progress (also a heartbeat: the controller takes a head
// that stops changing for a runner that died), the done set and pending records,
// sealing the pending records into chunk slots when they grew large. With final,
// it marks the shard succeeded, waiting (until ctx ends) for slots if the
// records do not fit the head.
func (s *Store) Flush(ctx context.Context, final bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		err := s.flush(ctx, final)
		if !final || !errors.Is(err, ErrNoSlot) {
			return err
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			s.mu.Lock()
			return fmt.Errorf("%w: %w", err, ctx.Err())
		case <-time.After(time.Second):
		}
		s.mu.Lock()
	}
}

func (s *Store) flush(ctx context.Context, final bool) error {
	if s.inStore {
		return s.flushToStore(ctx, final)
	}
	gz, err := gzipRecordLines(s.pending)
	if err != nil {
		return err
	}
	need := 0 // chunks of records still waiting for a slot
	if len(gz) > cluster.MaxHeadPendingBytes {
		if need, err = s.seal(ctx); err != nil {
			return err
		}
		if gz, err = gzipRecordLines(s.pending); err != nil {
			return err
		}
	}
	// Ask for slots ahead, once records outgrow a quarter of the head, so that
	// the controller has made them by the time they are needed.
	want := 0
	if s.progress.Chunks > 0 || len(gz) > cluster.MaxHeadPendingBytes/4 {
		want = s.progress.Chunks + cluster.SpareSlots
	}
	s.progress.Want = max(want, s.progress.Chunks+need)
	if len(gz) > cluster.MaxHeadBytes {
		// Say how many slots are needed, without touching what the head holds
		// (its done set must only name records it or the slots hold).
		return errors.Join(ErrNoSlot, s.askForSlots(ctx))
	}
	if final {
		s.progress.State = cluster.StateSucceeded
	}
	return s.writeHead(ctx, gz)
}

// seal moves pending records into the next free chunk slots, as many as the
// controller granted; what does not fit stays pending, and it returns how many
// chunks that is.
func (s *Store) seal(ctx context.Context) (int, error) {
	limit := cluster.MaxChunkBytes
	if s.inStore {
		limit = cluster.MaxStagingChunkBytes
	}
	chunks, err := packChunks(s.pending, limit)
	if err != nil {
		return 0, err
	}
	for i, ch := range chunks {
		fill := s.fillSlot
		if s.inStore {
			fill = s.fillStaging
		}
		ok, err := fill(ctx, s.progress.Chunks, ch.gz)
		if err != nil || !ok {
			var rest [][]byte
			for _, c := range chunks[i:] {
				rest = append(rest, c.lines...)
			}
			s.pending, s.raw = rest, rawSize(rest)
			return len(chunks) - i, err
		}
		s.progress.Chunks++
	}
	s.pending, s.raw = nil, 0
	return 0, nil
}

// fillSlot writes records into a chunk slot. It reports false when the slot is
// not there yet, or not yet allowed to this runner.
func (s *Store) fillSlot(ctx context.Context, k int, gz []byte) (bool, error) {
	name := cluster.ChunkName(s.head, k)
	for attempt := 0; ; attempt++ {
		var cm corev1.ConfigMap
		err := GetConfigMap(ctx, s.c, s.ev, name, &cm)
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading chunk slot %s: %w", name, err)
		}
		cm.BinaryData = map[string][]byte{cluster.KeyRecords: gz}
		cm.Data = nil
		err = s.c.Update(ctx, &cm)
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsConflict(err) && attempt < 3:
			continue
		case apierrors.IsForbidden(err) || apierrors.IsNotFound(err):
			return false, nil
		}
		return false, fmt.Errorf("sealing records into %s: %w", name, err)
	}
}

// askForSlots writes only progress.Want into the head.
func (s *Store) askForSlots(ctx context.Context) error {
	var p cluster.ShardProgress
	if old, ok := cluster.ParseProgress(s.obj.Annotations); ok {
		p = old
	}
	if p.Want == s.progress.Want {
		return nil
	}
	p.Want = s.progress.Want
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	cm := s.obj.DeepCopy()
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[cluster.AnnotationProgress] = string(b)
	if err := s.c.Update(ctx, cm); err != nil {
		return fmt.Errorf("asking for chunk slots in %s: %w", s.head, err)
	}
	s.obj = cm
	return nil
}

func rawSize(lines [][]byte) int {
	n := 0
	for _, l := range lines {
		n += len(l)
	}
	return n
}

// writeHead updates the head, re-reading it after a conflict: the shard's pod is
// its only writer, so our state wins.
func (s *Store) writeHead(ctx context.Context, pendingGz []byte) error {
	s.progress.Awaiting = len(s.awaiting)
	prog, err := json.Marshal(s.progress)
	if err != nil {
		return err
	}
	var batches []byte
	if len(s.batches) > 0 {
		if batches, err = json.Marshal(s.batches); err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		cm := s.obj.DeepCopy()
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		cm.Annotations[cluster.AnnotationProgress] = string(prog)
		if batches != nil {
			cm.Annotations[cluster.AnnotationBatches] = string(batches)
		}
		cm.Data = map[string]string{cluster.KeyDone: formatRanges(s.done, s.shard.Start)}
		if len(s.awaiting) > 0 {
			set := make([]bool, len(s.done))
			for i := range s.awaiting {
				set[i-s.shard.Start] = true
			}
			cm.Data[cluster.KeyAwaiting] = formatRanges(set, s.shard.Start)
		}
		cm.BinaryData = nil
		if len(pendingGz) > 0 {
			cm.BinaryData = map[string][]byte{cluster.KeyPending: pendingGz}
		}
		err := s.c.Update(ctx, cm)
		if err == nil {
			s.obj = cm
			return nil
		}
		if !apierrors.IsConflict(err) || attempt >= 3 {
			return fmt.Errorf("updating shard head %s: %w", s.head, err)
		}
		var fresh corev1.ConfigMap
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.head}, &fresh); err != nil {
			return fmt.Errorf("re-reading shard head %s: %w", s.head, err)
		}
		s.obj = &fresh
	}
}

// gzipRecordLines compresses record lines for a head or a chunk slot: fast,
// as a runner flushes every few seconds.
func gzipRecordLines(lines [][]byte) ([]byte, error) { return results.GzipLines(lines, gzip.BestSpeed) }

// chunk is a batch of record lines and their gzip.
type chunk struct {
	lines [][]byte
	gz    []byte
}

// packChunks gzips lines into as few chunks as fit limit bytes each.
func packChunks(lines [][]byte, limit int) ([]chunk, error) {
	if len(lines) == 0 {
		return nil, nil
	}
	gz, err := gzipRecordLines(lines)
	if err != nil {
		return nil, err
	}
	if len(gz) <= limit {
		return []chunk{{lines, gz}}, nil
	}
	if len(lines) == 1 {
		return nil, fmt.Errorf("one record compresses to %d bytes, more than a chunk holds (%d)", len(gz), limit)
	}
	a, err := packChunks(lines[:len(lines)/2], limit)
	if err != nil {
		return nil, err
	}
	b, err := packChunks(lines[len(lines)/2:], limit)
	return append(a, b...), err
}

// formatRanges writes the done positions as "a-b,c,...", absolute.
func formatRanges(done []bool, offset int) string {
	var parts []string
	for i := 0; i < len(done); {
		if !done[i] {
			i++
			continue
		}
		j := i
		for j+1 < len(done) && done[j+1] {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(offset+i))
		} else {
			parts = append(parts, strconv.Itoa(offset+i)+"-"+strconv.Itoa(offset+j))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// parseRanges marks the positions of s ("a-b,c,...") in done (indexed from offset).
func parseRanges(s string, offset int, done []bool) error {
	if s == "" {
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return fmt.Errorf("done set %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return fmt.Errorf("done set %q: %w", s, err)
			}
		}
		for i := a; i <= b; i++ {
			if k := i - offset; k >= 0 && k < len(done) {
				done[k] = true
			}
		}
	}
	return nil
}

// ErrObsolete is returned when a runner's run is no longer the Evaluation's run.
var ErrObsolete = errors.New("the evaluation changed: this run is obsolete")
