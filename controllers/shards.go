package controllers

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/ratelimit"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/spend"
)

// shardState is what the controller knows of one shard.
type shardState struct {
	cluster.Shard
	// workers is how many workers run its model's shards: the shards before
	// and after it on its worker are Index ∓ workers (cluster.WorkerShards).
	workers  int
	head     string
	progress cluster.ShardProgress
	// batches are the shard's batches (its model in batch mode).
	batches []results.BatchRecord
	hasHead bool
	// active: its runner reports running and was heard from recently (it holds
	// a share of the budget).
	active bool
	// lastActive is when this controller last saw it active (zero: never).
	lastActive time.Time
	completed  bool
	failed     bool
	// pod is what its newest pod shows; cause, for a failed shard, why its
	// last pod failed.
	pod   podView
	cause *problem
}

// observeShards reads every shard's progress from its head (a metadata-only
// cache: progress is an annotation), its outcome from its Job and its state
// from its newest pod, and derives the status's progress, shard counts, live
// score, and what is wrong with the pods (judgeHealth).
func (r *EvaluationReconciler) observeShards(ctx context.Context, p *pass) (bool, error) {
	if p.plan == nil {
		return true, nil
	}
	ev := p.ev
	suspended := ev.Spec.Suspend != nil && *ev.Spec.Suspend
	jobs := make([]*batchv1.Job, 0, len(p.jobs))
	for _, j := range p.jobs {
		jobs = append(jobs, j)
	}
	podsByJob, err := r.listJobPods(ctx, ev.Namespace, jobs)
	if err != nil {
		return false, err
	}
	heads, err := r.listConfigMaps(ctx, client.InNamespace(ev.Namespace), client.MatchingLabels{
		cluster.LabelEvaluation: cluster.LabelValue(ev.Name), cluster.LabelRun: p.run, cluster.LabelComponent: cluster.ComponentShard,
	})
	if err != nil {
		return false, err
	}
	byName := map[string]*metav1.PartialObjectMetadata{}
	for i := range heads {
		if !r.ignoreForeign(p, "ConfigMap", &heads[i]) {
			byName[heads[i].Name] = &heads[i]
			p.headsInStore = p.headsInStore || cluster.InStore(heads[i].Annotations)
		}
	}

	key := client2key(ev)
	subjects := cluster.Subjects(&ev.Spec)
	var progress v1alpha1.Progress
	counts := v1alpha1.ShardCounts{}
	var scoreSum float64
	var scoreDone int
	metric := firstMetric(&ev.Spec)
	anyActive := false
	var stored int64
	for mi, model := range subjects {
		job := p.jobs[model]
		shards := p.plan.Shards(&ev.Spec, model)
		// The Job's indexes are its workers (cluster.WorkerShards): a Job
		// made before workers had one per shard, which is the same.
		workers := len(shards)
		if job != nil && job.Spec.Completions != nil && *job.Spec.Completions > 0 {
			workers = int(*job.Spec.Completions)
		}
		completed, failed := map[int]bool{}, map[int]bool{}
		var pods, lastFailed, lastCause map[int]*corev1.Pod
		if job != nil {
			completed = parseIndexes(job.Status.CompletedIndexes, workers)
			if job.Status.FailedIndexes != nil {
				failed = parseIndexes(*job.Status.FailedIndexes, workers)
			}
			pods = indexPods(podsByJob[job.Name])
			failedPods := slices.DeleteFunc(slices.Clone(podsByJob[job.Name]), func(pod corev1.Pod) bool {
				return pod.Status.Phase != corev1.PodFailed
			})
			lastFailed = indexPods(failedPods)
			// A pod that found its shard's retries used up says only that:
			// why the shard failed is the pod before it.
			lastCause = indexPods(slices.DeleteFunc(failedPods, func(pod corev1.Pod) bool {
				_, t := terminated(&pod)
				return t != nil && t.ExitCode == cluster.ExitRetriesUsed || disrupted(&pod)
			}))
			if !suspended && job.UID != "" {
				fc, err := r.failedCreate(ctx, job, podsByJob[job.Name])
				if err != nil {
					return false, err
				}
				if fc != nil {
					p.problems = append(p.problems, *fc)
				}
			}
		}
		states := make([]shardState, len(shards))
		// current is each worker's shard: the first of its shards that has
		// not succeeded, which its pod runs (or its next pod resumes).
		current := map[int]int{}
		for i, s := range shards {
			st := &states[i]
			*st = shardState{Shard: s, workers: workers, head: cluster.HeadName(ev.Name, p.run, model, s.Index)}
			if h := byName[st.head]; h != nil {
				st.hasHead = true
				st.progress, _ = cluster.ParseProgress(h.Annotations)
				st.batches, _ = cluster.ParseBatches(h.Annotations)
			}
			w := cluster.WorkerOf(s.Index, workers)
			st.completed = st.progress.State == cluster.StateSucceeded || completed[w]
			if _, ok := current[w]; !ok && !st.completed {
				current[w] = i
			}
		}
		for i := range states {
			st, s := &states[i], shards[i]
			w := cluster.WorkerOf(s.Index, workers)
			cur, hasCur := current[w]
			mine := hasCur && cur == i
			st.failed = failed[w] && mine
			if h := byName[st.head]; h != nil {
				changed := r.heads.changedAt(key, st.head, h.ResourceVersion, p.now)
				fresh := p.now.Sub(changed) < r.Options.StaleAfter
				st.active = st.progress.State == cluster.StateRunning && fresh && !st.completed && !st.failed
				if st.active {
					r.heads.sawActive(key, st.head, p.now)
				}
				st.lastActive = r.heads.lastActive(key, st.head)
			}
			if pod := pods[w]; pod != nil && mine {
				// The shard's attempts, as its pods counted them (a worker's
				// pods run many shards); else the Job's count for the worker.
				attempts := int32(st.progress.Attempts)
				if attempts == 0 {
					attempts = 1
					if n, err := strconv.Atoi(pod.Annotations[annotationIndexFailures]); err == nil {
						attempts += int32(n)
					}
				}
				st.pod = viewPod(pod, s.Key(), attempts)
				if st.failed {
					st.cause = st.pod.problem
					if prev := lastCause[w]; prev != nil && prev.Name != pod.Name {
						// The last of the pods that failed the shard.
						st.cause = viewPod(prev, s.Key(), int32(st.progress.Attempts)).problem
					}
				}
				if st.pod.problem == nil && !st.failed && !suspended {
					// A retry of a shard whose last pod failed: its failure
					// stays said (REASON went blank between OOM retries).
					// The worker's last failed pod may have failed on a shard
					// it finished since: it is this shard's if this shard's
					// head was last written by it, or was begun again.
					prev := lastFailed[w]
					if prev != nil && prev.Name != pod.Name && (st.progress.Pod == "" || st.progress.Pod == prev.Name || st.progress.Attempts > 1) {
						if pr := viewPod(prev, s.Key(), attempts-1).problem; pr != nil {
							pr.message += "; the shard is being retried"
							pr.stall = false
							st.pod.problem = pr
						}
					}
				}
				if st.pod.problem != nil && !suspended {
					p.problems = append(p.problems, *st.pod.problem)
				}
				p.anyRunning = p.anyRunning || st.pod.running
			}
		}
		for i := range states {
			st := states[i]
			anyActive = anyActive || st.active
			if st.active {
				p.noteThrottled(st.progress.Throttled)
				p.noteProvider(st.progress.Provider, st.progress.Usage)
			}
			stored += st.progress.Stored
			progress.Completed += int64(st.progress.Done)
			progress.Errored += int64(st.progress.Errored)
			if mi == 0 {
				scoreSum += st.progress.Scores[metric]
				scoreDone += st.progress.Done
			}
			counts.Total++
			switch {
			case st.completed:
				counts.Succeeded++
			case st.failed:
				counts.Failed++
			case st.pod.running:
				counts.Active++
			case st.pod.pending:
				counts.Pending++
			}
			p.shards = append(p.shards, st)
		}
	}
	p.status.Batches = batchesStatus(&ev.Spec, p.shards)
	progress.Total = int64(p.plan.Total() * len(subjects))
	progress.Text = fmt.Sprintf("%d/%d", progress.Completed, progress.Total)
	p.status.Progress = &progress
	p.status.Shards = &counts
	p.status.StoredBytes = stored
	if metric != "" && scoreDone > 0 {
		p.status.Score = fmt.Sprintf("%.4f", scoreSum/float64(scoreDone))
	}
	if old := p.ev.Status.Shards; counts.Failed > 0 && (old == nil || counts.Failed > old.Failed) {
		_, msg := failedShards(p.shards, r.Options.ShardRetries)
		p.event(corev1.EventTypeWarning, v1alpha1.ReasonShardFailed, "%s", msg)
	}
	r.judgeHealth(p)
	if anyActive {
		// Staleness is noticed even if a dead runner sends nothing more.
		p.requeueAfter(r.Options.StaleAfter)
	}
	return true, nil
}

// divideBudget re-divides each rate-limited model's budget among the running
// shards that call it, and spec.budget among the shards (see cluster.Budget
// and cluster.SpendBudget for the protocols). A spec.budget that every running
// shard waits for more of, and no more is left, ends the run: BudgetExceeded.
func (r *EvaluationReconciler) divideBudget(ctx context.Context, p *pass) (bool, error) {
	limits := apiconv.ModelLimits(&p.ev.Spec)
	budget := p.ev.Spec.Budget
	if p.plan == nil {
		return true, nil
	}
	r.observeSpend(p)
	cm := &metav1.PartialObjectMetadata{}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := r.Get(ctx, client.ObjectKey{Namespace: p.ev.Namespace, Name: cluster.BudgetName(p.ev.Name)}, cm); err != nil {
		if apierrors.IsNotFound(err) && limits == nil && budget == nil {
			return true, nil // none is made before a model has a limit (ensureBudget)
		}
		return false, client.IgnoreNotFound(err)
	}
	prev, err := cluster.ParseBudget(cm.Annotations)
	if err != nil {
		return false, err
	}
	if limits == nil && budget == nil && len(prev.Models) == 0 && prev.Spend == nil {
		// Nothing to divide, and nothing to take back: a limit removed
		// mid-run is divided once more, without its model, so that its
		// shards stop taking shares of it.
		return true, nil
	}
	next, changed := prev, false
	if limits != nil || len(prev.Models) > 0 {
		key := client2key(p.ev)
		users, acked := r.budgetUsers(p, key, prev, limits)
		next, changed = cluster.DivideWeighted(prev, limits, users, acked)
		// What each running shard may use from now on: its share, should it
		// stop before the next division.
		for _, s := range p.shards {
			if s.active {
				for model := range limits {
					r.heads.noteUsing(key, s.head, model, next.Using(model, s.Key()))
				}
			}
		}
	}
	if budget != nil {
		limit, err := apiconv.SpendLimit(budget)
		if err != nil {
			return false, err
		}
		sb, spendChanged, exhausted := cluster.DivideSpend(prev.Spend, limit, spendShards(p.shards))
		if spendChanged && !changed {
			copied := *prev
			copied.Version++
			next, changed = &copied, true
		}
		next.Spend = sb
		if exhausted && p.stalled == nil {
			p.stalled = &problem{reason: v1alpha1.ReasonBudgetExceeded, stall: true, message: exhaustedMessage(p, limit)}
		}
	} else if prev.Spend != nil && !changed {
		copied := *prev
		copied.Version++
		next, changed = &copied, true
	}
	if budget == nil {
		next.Spend = nil
	}
	if !changed {
		return true, nil
	}
	// Divided from what the cache holds, so written only over that version: a
	// division from a stale budget would miscount the grants in use.
	patch := client.MergeFromWithOptions(cm.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if err := cluster.SetBudget(cm.Annotations, next); err != nil {
		return false, err
	}
	if err := r.Patch(ctx, cm, patch); err != nil {
		if apierrors.IsConflict(err) {
			p.requeueAfter(100 * time.Millisecond)
			return true, nil
		}
		return false, err
	}
	return true, nil
}

// budgetUsers are the shards that share each rate-limited model's limits, and
// the budget version each acknowledged (cluster.DivideWeighted).
//
// A shard that stopped keeps a share that shrinks to nothing over a window:
// the server still counts the calls it sent within the last minute (paced,
// so no more than its share's worth of the part of the minute not yet past),
// which another shard's raise must not add to. Once its worker has begun its
// next shard, whose calls come after its own, only what it used beyond that
// shard's share lingers (cluster.LingeringBehind); a next shard with no grant
// yet takes over what that frees (cluster.TakeOver), so a worker going from
// shard to shard keeps its pace.
func (r *EvaluationReconciler) budgetUsers(p *pass, key types.NamespacedName, prev *cluster.Budget, limits map[string]ratelimit.Limits) (map[string][]cluster.User, map[string]int64) {
	judges := p.ev.Spec.JudgeModels()
	onWorker := workerNeighbors(p.shards)
	users := map[string][]cluster.User{}
	acked := map[string]int64{}
	// starts are the shares next shards take over, by model and key.
	starts := map[[2]string]ratelimit.Limits{}
	for _, s := range p.shards {
		left := 1.0
		if !s.active {
			remaining := cluster.RateWindow - p.now.Sub(s.lastActive)
			if s.lastActive.IsZero() || remaining <= 0 {
				continue
			}
			left = float64(remaining) / float64(cluster.RateWindow)
			p.requeueAfter(min(remaining, cluster.RateWindow/12))
		}
		for model := range limits {
			// A model is called by its own shards, and a judge by every shard.
			if model != s.Model && !judges[model] {
				continue
			}
			u := cluster.User{Key: s.Key(), Stopped: left < 1}
			if left < 1 {
				used := r.heads.using(key, s.head, model)
				u.Cap = cluster.Lingering(used, left)
				if n := onWorker(s, +1); n != nil && (n.active || !n.lastActive.IsZero()) {
					var after ratelimit.Limits
					switch {
					case !n.active:
						after = r.heads.using(key, n.head, model)
					case hasGrant(prev, model, n.Key()):
						// It may use no less than this until the next division.
						after = prev.Models[model].Grants[n.Key()].Share
					case hasGrant(prev, model, s.Key()):
						after = cluster.TakeOver(used, prev.Models[model].Grants[s.Key()].Share, left)
						starts[[2]string{model, n.Key()}] = after
					}
					u.Cap = cluster.LingeringBehind(used, after, left)
				}
				if u.Cap.IsZero() {
					continue
				}
			}
			users[model] = append(users[model], u)
		}
		acked[s.Key()] = s.progress.Budget
		if left < 1 {
			// It sends nothing more: its lowered share applies at once.
			acked[s.Key()] = math.MaxInt64
		}
	}
	for model, us := range users {
		for i := range us {
			us[i].Start = starts[[2]string{model, us[i].Key}]
		}
	}
	return users, acked
}

// hasGrant reports whether key holds a grant of model in b.
func hasGrant(b *cluster.Budget, model, key string) bool {
	if b == nil || b.Models[model] == nil {
		return false
	}
	_, ok := b.Models[model].Grants[key]
	return ok
}

// workerNeighbors finds the shard before (-1) or after (+1) a shard on its
// worker, nil if none.
func workerNeighbors(shards []shardState) func(s shardState, dir int) *shardState {
	type at struct {
		model string
		index int
	}
	byIndex := make(map[at]*shardState, len(shards))
	for i := range shards {
		byIndex[at{shards[i].Model, shards[i].Index}] = &shards[i]
	}
	return func(s shardState, dir int) *shardState {
		if s.workers < 1 {
			return nil
		}
		return byIndex[at{s.Model, s.Index + dir*s.workers}]
	}
}

// spendShards is what the shards' heads say of their spending: a running
// shard's runner reports its ledger; the others, what their records cost.
func spendShards(shards []shardState) []cluster.SpendShard {
	out := make([]cluster.SpendShard, 0, len(shards))
	for _, s := range shards {
		ss := cluster.SpendShard{Key: s.Key(), Running: s.active, Finished: s.completed || s.failed, Spent: s.progress.Spent}
		if l := s.progress.Ledger; l != nil && s.active {
			ss.Spent, ss.Reserved, ss.Needed, ss.Blocked = l.Spent, l.Reserved, l.Needed, l.Blocked
		}
		out = append(out, ss)
	}
	return out
}

// observeSpend sets status.spend from the shards' heads, when the run has a
// budget or a model has pricing (else its cost is simply not followed).
func (r *EvaluationReconciler) observeSpend(p *pass) {
	priced := slices.ContainsFunc(p.ev.Spec.Models, func(m v1alpha1.Model) bool { return m.Pricing != nil || apiconv.ModelCostKnown(&m) })
	if p.ev.Spec.Budget == nil && !priced {
		p.status.Spend = nil
		return
	}
	var total spend.Totals
	for _, s := range spendShards(p.shards) {
		total = total.Add(s.Spent)
	}
	st := &v1alpha1.SpendStatus{Cost: v1alpha1.CostUnknown, Tokens: total.Tokens}
	if apiconv.CostKnown(&p.ev.Spec) {
		st.Cost = total.Cost.Decimal()
	}
	if b := p.ev.Spec.Budget; b != nil {
		if limit, err := apiconv.SpendLimit(b); err == nil && b.MaxCost != nil {
			st.MaxCost = strings.TrimPrefix(limit.CostText(), "$")
		}
		if b.MaxTokens != nil {
			st.MaxTokens = *b.MaxTokens
		}
	}
	p.status.Spend = st
}

// exhaustedMessage says what was spent of the budget, and how to go on.
func exhaustedMessage(p *pass, limit spend.Limit) string {
	st := p.status.Spend
	var parts []string
	if limit.Cost > 0 {
		parts = append(parts, fmt.Sprintf("spent $%s of spec.budget.maxCost $%s", st.Cost, st.MaxCost))
	}
	if limit.Tokens > 0 {
		parts = append(parts, fmt.Sprintf("used %d of spec.budget.maxTokens %d tokens", st.Tokens, limit.Tokens))
	}
	done, total := int64(0), int64(0)
	if pr := p.status.Progress; pr != nil {
		done, total = pr.Completed, pr.Total
	}
	return fmt.Sprintf("the budget is exhausted: %s; %d of %d samples done, the rest need more than is left. Raise spec.budget to resume the run",
		strings.Join(parts, ", "), done, total)
}

func firstMetric(spec *v1alpha1.EvaluationSpec) string {
	if len(spec.Scoring) == 0 {
		return ""
	}
	return spec.Scoring[0].MetricName()
}

// parseIndexes reads a Job's index list ("1,3-5"), ignoring indexes from limit on.
func parseIndexes(s string, limit int) map[int]bool {
	out := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil {
			continue
		}
		for i := max(a, 0); i <= b && i < limit; i++ {
			out[i] = true
		}
	}
	return out
}

// failedShards names the failed shards for messages, with why their last pod
// failed when it is known; reason is the first shard's cause, else ShardsFailed.
func failedShards(shards []shardState, retries int32) (reason, message string) {
	var names []string
	unexplained := false
	for _, s := range shards {
		if !s.failed {
			continue
		}
		name := fmt.Sprintf("%s/%d (%s samples %d-%d)", s.Model, s.Index, s.Dataset, s.Start, s.End-1)
		if s.cause != nil {
			name += ": " + s.cause.message
			if reason == "" {
				reason = s.cause.reason
			}
		} else {
			unexplained = true
		}
		names = append(names, name)
	}
	if reason == "" {
		reason = v1alpha1.ReasonShardsFailed
	}
	sep := ", "
	if reason != v1alpha1.ReasonShardsFailed {
		sep = "; " // the causes have commas of their own
	}
	message = fmt.Sprintf("%d shard(s) failed (each is retried up to %d times, a configuration error or a failed hook not at all): %s",
		len(names), retries, strings.Join(names, sep))
	if unexplained {
		message += "; see the logs of their pods"
	}
	return reason, message
}

// jobsFinished reports whether every model's Job has finished, and which failed.
func jobsFinished(jobs map[string]*batchv1.Job) (finished, anyFailed bool) {
	for _, j := range jobs {
		switch {
		case jobFinished(j, batchv1.JobComplete):
		case jobFinished(j, batchv1.JobFailed):
			anyFailed = true
		default:
			return false, false
		}
	}
	return true, anyFailed
}

// allSucceeded reports whether every shard of the run succeeded: its head
// says so, or its worker's Job index completed.
func allSucceeded(shards []shardState) bool {
	for _, s := range shards {
		if !s.completed {
			return false
		}
	}
	return len(shards) > 0
}

// batchesStatus sums the shards' batches, when a model runs in batch mode.
func batchesStatus(spec *v1alpha1.EvaluationSpec, shards []shardState) *v1alpha1.BatchesStatus {
	if !slices.ContainsFunc(spec.Models, func(m v1alpha1.Model) bool { return m.Batch != nil }) {
		return nil
	}
	st := &v1alpha1.BatchesStatus{}
	for _, s := range shards {
		for _, b := range s.batches {
			if b.ID == "" {
				continue // intended: not known to be submitted
			}
			st.Submitted++
			if b.State == results.BatchDone {
				st.Ended++
				continue
			}
			st.Pending += int64(len(b.Indexes))
			if len(st.InFlight) < 50 {
				ref := v1alpha1.BatchRef{ID: b.ID, Shard: s.Key(), Requests: int32(len(b.Indexes))}
				if judge, scorer, ok := results.JudgeBatchOf(b.Model); ok {
					ref.Judge = judge + "/" + scorer
				}
				st.InFlight = append(st.InFlight, ref)
			}
		}
	}
	st.Text = fmt.Sprintf("%d/%d", st.Ended, st.Submitted)
	return st
}
