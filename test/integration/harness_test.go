package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/controllers"
	"github.com/proctor-dev/proctor/internal/cli"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/internal/compile"
	"github.com/proctor-dev/proctor/internal/shard"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// Timings shortened for tests; the protocols are the same as in production.
const (
	testFlushEvery  = 150 * time.Millisecond
	testBudgetEvery = 150 * time.Millisecond
	testStaleAfter  = 3 * time.Second
)

var nsCounter atomic.Int64

// newNamespace creates a namespace of its own for a test.
func newNamespace(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%d", time.Now().UnixNano()%1e6, nsCounter.Add(1))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return name
}

// fakeLLM starts a fake model server; it returns the server and its OpenAI base URL.
func fakeLLM(t testing.TB, cfg fakellm.Config) (*fakellm.Server, string) {
	t.Helper()
	s := fakellm.New(cfg)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return s, hs.URL + "/v1"
}

// manager is a running Proctor manager, watching one namespace.
type manager struct {
	t      testing.TB
	cancel context.CancelFunc
	done   chan error
}

// startManager starts the real manager (the same wiring as `proctor manager`,
// with test timings) for namespace ns.
func startManager(t testing.TB, ns string) *manager {
	t.Helper()
	return startManagerWith(t, ns, nil)
}

// startManagerWith starts the manager with options edited by edit.
func startManagerWith(t testing.TB, ns string, edit func(*controllers.Options)) *manager {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 k8sClient.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cli.CacheOptions(ns),
		Logger:                 logFor(t),
		Controller:             ctrlConfig(),
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &controllers.EvaluationReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
		Recorder:    mgr.GetEventRecorder("proctor"),
		RunnerImage: "proctor:test",
		CheckSpec:   compile.CheckData,
		Options:     controllers.Options{StaleAfter: testStaleAfter, ProgressInterval: 100 * time.Millisecond, RecheckAfter: 300 * time.Millisecond, ShardRetries: 3},
	}
	// The pacer, on loopback, as the chart serves it to runner pods.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.Options.PacerURL = "http://" + ln.Addr().String()
	if edit != nil {
		edit(&r.Options)
	}
	pc, err := cli.NewPacer(mgr, "")
	if err != nil {
		t.Fatal(err)
	}
	pc.Listener = ln
	if err := mgr.Add(pc); err != nil {
		t.Fatal(err)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	er := &controllers.ModelEndpointReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Options: r.Options, Recorder: mgr.GetEventRecorder("proctor")}
	if err := er.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	qr := &controllers.ModelQuotaReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Options: r.Options}
	if err := qr.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &manager{t: t, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- mgr.Start(ctx) }()
	t.Cleanup(m.stop)
	return m
}

func (m *manager) stop() {
	m.cancel()
	if err := <-m.done; err != nil {
		m.t.Errorf("manager: %v", err)
	}
	m.done <- nil // later stops return at once
}

// kubelet stands in for the Job controller and the kubelet, which the test API
// server does not have: it runs the pods of Proctor's Jobs in a namespace as
// in-process calls of what `proctor shard` and `proctor plan` run, honouring
// completions, parallelism, backoffLimitPerIndex and suspend, and writes Job
// status as the Job controller would.
type kubelet struct {
	t   testing.TB
	ns  string
	log logr.Logger

	mu      sync.Mutex
	jobs    map[types.UID]*jobRun
	running map[string]context.CancelFunc // "model/index" → the attempt in flight
	starts  map[string]int                // "model/index" → attempts started
	// onStart, if set, is called as each attempt starts.
	onStart func(model string, index, attempt int)
	// edit, if set, changes the runner's options (benchmarks: production timings).
	edit func(*shard.Options)
	// crash lists shards ("model/index") whose pods crash at once, every time.
	crash map[string]bool
	// finishedAt records when each Job was marked Complete or Failed.
	finishedAt map[string]time.Time
	stopped    atomic.Bool
	// collected is when sync last deleted the pods of deleted Jobs.
	collected time.Time
}

func startKubelet(t testing.TB, ns string) *kubelet {
	return startKubeletWith(t, ns, nil)
}

// startKubeletWith starts the kubelet with the runner's options edited by edit.
func startKubeletWith(t testing.TB, ns string, edit func(*shard.Options)) *kubelet {
	k := &kubelet{t: t, ns: ns, log: logFor(t), jobs: map[types.UID]*jobRun{}, running: map[string]context.CancelFunc{}, starts: map[string]int{},
		finishedAt: map[string]time.Time{}, edit: edit}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			k.sync(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		k.stopped.Store(true)
		cancel()
		<-done
		k.mu.Lock()
		runs := make([]*jobRun, 0, len(k.jobs))
		for _, r := range k.jobs {
			runs = append(runs, r)
		}
		k.mu.Unlock()
		for _, r := range runs {
			r.cancel()
			r.wg.Wait()
		}
	})
	return k
}

// kill cancels the attempt running shard model/index, as deleting its pod would.
func (k *kubelet) kill(model string, index int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	cancel, ok := k.running[fmt.Sprintf("%s/%d", model, index)]
	if ok {
		cancel()
	}
	return ok
}

// lastFinished is when the last Job was marked finished.
func (k *kubelet) lastFinished() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	var last time.Time
	for _, t := range k.finishedAt {
		if t.After(last) {
			last = t
		}
	}
	return last
}

// attempts returns how many pods shard model/index started.
func (k *kubelet) attempts(model string, index int) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.starts[fmt.Sprintf("%s/%d", model, index)]
}

type jobRun struct {
	name   string
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	active    int
	completed map[int]bool
	failed    map[int]bool
}

// sync starts runs for new Jobs and cancels those of deleted ones. Every
// second, it also deletes the pods of Jobs that are gone, as the garbage
// collector would.
func (k *kubelet) sync(ctx context.Context) {
	var pods *corev1.PodList
	if time.Since(k.collected) > time.Second {
		// Listed before the Jobs: a pod listed has its Job listed, unless
		// the Job is gone.
		k.collected, pods = time.Now(), &corev1.PodList{}
		if err := k8sClient.List(ctx, pods, client.InNamespace(k.ns)); err != nil {
			return
		}
	}
	var jobs batchv1.JobList
	if err := k8sClient.List(ctx, &jobs, client.InNamespace(k.ns)); err != nil {
		return
	}
	seen := map[types.UID]bool{}
	defer func() {
		if pods == nil {
			return
		}
		for i := range pods.Items {
			if o := metav1.GetControllerOf(&pods.Items[i]); o != nil && o.Kind == "Job" && !seen[o.UID] {
				_ = k8sClient.Delete(ctx, &pods.Items[i])
			}
		}
	}()
	for i := range jobs.Items {
		j := &jobs.Items[i]
		seen[j.UID] = true
		k.mu.Lock()
		_, known := k.jobs[j.UID]
		if !known && j.DeletionTimestamp == nil && !finished(j) {
			runCtx, cancel := context.WithCancel(ctx)
			r := &jobRun{name: j.Name, cancel: cancel, completed: map[int]bool{}, failed: map[int]bool{}}
			k.jobs[j.UID] = r
			r.wg.Add(1)
			go k.runJob(runCtx, j.DeepCopy(), r)
		}
		k.mu.Unlock()
	}
	k.mu.Lock()
	for uid, r := range k.jobs {
		if !seen[uid] {
			r.cancel()
		}
	}
	k.mu.Unlock()
}

func finished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// runJob runs a Job's indexes and reports its status.
func (k *kubelet) runJob(ctx context.Context, j *batchv1.Job, r *jobRun) {
	defer r.wg.Done()
	args := j.Spec.Template.Spec.Containers[0].Args
	opts := shard.Options{
		Namespace:  j.Namespace,
		Evaluation: flagValue(args, "--evaluation"),
		Run:        flagValue(args, "--run"),
		Model:      flagValue(args, "--model"),
		Workers:    flagInt(args, "--"+cluster.FlagWorkers, 0),
		// As the pod's flag defaults: -1 leaves the retries to the Job.
		ShardRetries: flagInt(args, "--"+cluster.FlagShardRetries, -1),
		LookupEnv:    k.podEnv(ctx, j),
		WorkDir:      k.t.TempDir(),
		FlushEvery:   testFlushEvery,
		BudgetEvery:  testBudgetEvery,
		FenceAfter:   testStaleAfter * 2 / 3,
		GracePeriod:  time.Second,
		Log:          k.log.WithValues("job", j.Name),
	}
	// The pacer, with a token of the pod's ServiceAccount for its audience.
	opts.PacerURL, _ = opts.LookupEnv(cluster.EnvPacerURL)
	opts.PacerToken = pacerToken(j)
	if k.edit != nil {
		k.edit(&opts)
	}
	k.setStatus(ctx, j.Name, r, false)
	// The runner acts as its pod would: as the pod's ServiceAccount, under the
	// Role the controller gave it (the API server's RBAC decides).
	c := podClient(k.t, j)
	if args[0] == "plan" {
		err := shard.Plan(ctx, c, opts)
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		if err != nil {
			r.failed[0] = true
		} else {
			r.completed[0] = true
		}
		r.mu.Unlock()
		k.setStatus(ctx, j.Name, r, true)
		return
	}

	completions := int(*j.Spec.Completions)
	sem := make(chan struct{}, max(1, int(*j.Spec.Parallelism)))
	var wg sync.WaitGroup
	for i := range completions {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			k.runIndex(ctx, j, r, opts, i)
		})
	}
	wg.Wait()
	if ctx.Err() == nil {
		k.setStatus(ctx, j.Name, r, true)
	}
}

// runIndex runs one index's pods (a worker's: they run its shards) until
// one succeeds or the retries run out, pausing while the Job is suspended.
// The pod failure policy's FailIndex exit codes are the runner's errors
// that say so (invalid input, a shard's retries used up).
func (k *kubelet) runIndex(ctx context.Context, j *batchv1.Job, r *jobRun, opts shard.Options, index int) {
	key := fmt.Sprintf("%s/%d", opts.Model, index)
	failures := 0
	c := podClient(k.t, j)
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if !k.waitUnsuspended(ctx, j) {
			return
		}
		podCtx, kill := context.WithCancel(ctx)
		suspended := k.watchSuspend(podCtx, j, kill)
		k.mu.Lock()
		k.running[key] = kill
		k.starts[key]++
		onStart := k.onStart
		k.mu.Unlock()
		if onStart != nil {
			onStart(opts.Model, index, attempt)
		}
		r.mu.Lock()
		r.active++
		r.mu.Unlock()
		k.setStatus(ctx, j.Name, r, false)

		o := opts
		o.Index, o.Pod = index, fmt.Sprintf("%s-%d-%d", j.Name, index, attempt)
		pod := k.startPod(ctx, j, index, attempt, failures, o.Pod)
		k.mu.Lock()
		crashing := k.crash[key]
		k.mu.Unlock()
		var err error
		if crashing {
			err = crashBegun(ctx, c, o)
		} else {
			err = shard.Run(podCtx, c, o)
		}
		k.endPod(ctx, pod, err)
		kill()
		k.mu.Lock()
		delete(k.running, key)
		k.mu.Unlock()
		r.mu.Lock()
		r.active--
		var invalid *shard.InvalidError
		switch {
		case err == nil || errors.Is(err, kube.ErrObsolete):
			r.completed[index] = true
		case errors.As(err, &invalid), errors.As(err, new(*shard.RetriesUsedError)):
			r.failed[index] = true // the pod failure policy: FailIndex on exit codes 2 and 4
		case suspended.Load() || ctx.Err() != nil:
			// Suspension or deletion is not the pod's fault.
		default:
			failures++
			if failures > int(*j.Spec.BackoffLimitPerIndex) {
				r.failed[index] = true
			}
		}
		done := r.completed[index] || r.failed[index]
		r.mu.Unlock()
		k.setStatus(ctx, j.Name, r, false)
		if done {
			return
		}
	}
}

// crashBegun is a runner pod that begins its worker's current shard (the
// first not succeeded) and crashes at once, as one OOM-killed would: the
// shard counts the attempt. A shard begun by as many pods as its retries
// allow is failed for good instead, as the runner does.
func crashBegun(ctx context.Context, c client.Client, o shard.Options) error {
	var ev v1alpha1.Evaluation
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Evaluation}, &ev); err != nil {
		return err
	}
	plan, err := kube.ReadPlan(ctx, c, &ev, o.Run)
	if err != nil {
		return err
	}
	all := plan.Shards(&ev.Spec, o.Model)
	workers := o.Workers
	if workers == 0 {
		workers = len(all)
	}
	mine, err := cluster.WorkerShards(all, o.Index, workers)
	if err != nil {
		return err
	}
	for _, sh := range mine {
		var head corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: cluster.HeadName(o.Evaluation, o.Run, o.Model, sh.Index)}, &head); err != nil {
			return err
		}
		p, _ := cluster.ParseProgress(head.Annotations)
		if p.State == cluster.StateSucceeded {
			continue
		}
		if o.ShardRetries >= 0 && p.Attempts > o.ShardRetries {
			return &shard.RetriesUsedError{Shard: sh, Attempts: p.Attempts}
		}
		p.State, p.Attempts, p.Pod = cluster.StateRunning, p.Attempts+1, o.Pod
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		head.Annotations[cluster.AnnotationProgress] = string(b)
		if err := c.Update(ctx, &head); err != nil {
			return err
		}
		break
	}
	return errors.New("the pod crashed")
}

// pacerToken returns a token of the ServiceAccount of Job j's pods for the
// pacer's audience, as the kubelet projects it into runner containers.
func pacerToken(j *batchv1.Job) func() (string, error) {
	var mu sync.Mutex
	var token string
	return func() (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if token != "" {
			return token, nil
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: j.Namespace, Name: j.Spec.Template.Spec.ServiceAccountName}}
		tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{cluster.PacerAudience}, ExpirationSeconds: ptrTo[int64](3600)}}
		if err := k8sClient.SubResource("token").Create(context.Background(), sa, tr); err != nil {
			return "", err
		}
		token = tr.Status.Token
		return token, nil
	}
}

// podClient is a client acting as the ServiceAccount of Job j's pods.
func podClient(t testing.TB, j *batchv1.Job) client.WithWatch {
	t.Helper()
	sa := j.Spec.Template.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: serviceaccount.MakeUsername(j.Namespace, sa)}
	pc, err := client.NewWithWatch(c, client.Options{Scheme: k8sClient.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

// waitUnsuspended waits while the Job is suspended; false if it went away.
func (k *kubelet) waitUnsuspended(ctx context.Context, j *batchv1.Job) bool {
	for ctx.Err() == nil {
		var cur batchv1.Job
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(j), &cur); err != nil {
			return false
		}
		if cur.Spec.Suspend == nil || !*cur.Spec.Suspend {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// watchSuspend kills a pod when its Job gets suspended, as the Job controller does.
func (k *kubelet) watchSuspend(ctx context.Context, j *batchv1.Job, kill context.CancelFunc) *atomic.Bool {
	var suspended atomic.Bool
	go func() {
		for ctx.Err() == nil {
			var cur batchv1.Job
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(j), &cur); err == nil && cur.Spec.Suspend != nil && *cur.Spec.Suspend {
				suspended.Store(true)
				kill()
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return &suspended
}

// podEnv resolves the runner container's environment as the kubelet would.
func (k *kubelet) podEnv(ctx context.Context, j *batchv1.Job) func(string) (string, bool) {
	env := map[string]string{}
	for _, e := range j.Spec.Template.Spec.Containers[0].Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			var s corev1.Secret
			ref := e.ValueFrom.SecretKeyRef
			if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: j.Namespace, Name: ref.Name}, &s); err == nil {
				if v, ok := s.Data[ref.Key]; ok {
					env[e.Name] = string(v)
				}
			}
		}
	}
	return func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
}

// setStatus writes a Job's status; final marks it Complete or Failed, with the
// interim conditions the API server requires before them.
func (k *kubelet) setStatus(ctx context.Context, name string, r *jobRun, final bool) {
	if k.stopped.Load() {
		return
	}
	for attempt := 0; attempt < 10; attempt++ {
		var j batchv1.Job
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: k.ns, Name: name}, &j); err != nil {
			return
		}
		r.mu.Lock()
		now := metav1.Now()
		if j.Status.StartTime == nil {
			j.Status.StartTime = &now
		}
		j.Status.Active = int32(r.active)
		j.Status.Succeeded = int32(len(r.completed))
		j.Status.Failed = int32(len(r.failed))
		indexed := j.Spec.CompletionMode != nil && *j.Spec.CompletionMode == batchv1.IndexedCompletion
		if indexed {
			j.Status.CompletedIndexes = formatIndexes(r.completed)
			if len(r.failed) > 0 {
				j.Status.FailedIndexes = ptrTo(formatIndexes(r.failed))
			}
		}
		failed := len(r.failed) > 0
		r.mu.Unlock()
		if final {
			j.Status.Active = 0
			if failed {
				setCond(&j, batchv1.JobFailureTarget, now)
				setCond(&j, batchv1.JobFailed, now)
			} else {
				setCond(&j, batchv1.JobSuccessCriteriaMet, now)
				setCond(&j, batchv1.JobComplete, now)
				j.Status.CompletionTime = &now
			}
		}
		err := k8sClient.Status().Update(ctx, &j)
		if err == nil && final {
			k.mu.Lock()
			k.finishedAt[name] = time.Now()
			k.mu.Unlock()
		}
		if err == nil || apierrors.IsNotFound(err) || ctx.Err() != nil {
			return
		}
		if !apierrors.IsConflict(err) {
			k.t.Errorf("writing status of Job %s: %v", name, err)
			return
		}
	}
}

func setCond(j *batchv1.Job, t batchv1.JobConditionType, now metav1.Time) {
	for _, c := range j.Status.Conditions {
		if c.Type == t {
			return
		}
	}
	j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{
		Type: t, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now, Reason: "Harness",
	})
}

func formatIndexes(set map[int]bool) string {
	var idx []int
	for i := range set {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	var parts []string
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(idx[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", idx[i], idx[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// flagInt is the value of a --name=N argument, or def.
func flagInt(args []string, name string, def int) int {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				return n
			}
		}
	}
	return def
}

func ptrTo[T any](v T) *T { return &v }

// eventually polls cond until it holds or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s; last: %s", timeout, what, last)
}

// getEvaluation reads an Evaluation.
func getEvaluation(t testing.TB, ns, name string) *v1alpha1.Evaluation {
	t.Helper()
	ev := &v1alpha1.Evaluation{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// waitPhase waits for an Evaluation to reach a phase.
func waitPhase(t testing.TB, ns, name string, phase v1alpha1.Phase, timeout time.Duration) *v1alpha1.Evaluation {
	t.Helper()
	var ev *v1alpha1.Evaluation
	eventually(t, timeout, fmt.Sprintf("%s to be %s", name, phase), func() (bool, string) {
		ev = getEvaluation(t, ns, name)
		return ev.Status.Phase == phase, fmt.Sprintf("phase %q message %q progress %+v", ev.Status.Phase, ev.Status.Message, ev.Status.Progress)
	})
	return ev
}

// ctrlConfig lets several managers (one per test, or a restarted one) register
// the same controller name in one process.
func ctrlConfig() ctrlconfig.Controller {
	return ctrlconfig.Controller{SkipNameValidation: ptrTo(true)}
}

// logFor logs through t in tests, and not at all in benchmarks (whose logs
// would distort their timings).
func logFor(t testing.TB) logr.Logger {
	if tt, ok := t.(*testing.T); ok {
		return testr.New(tt)
	}
	return logr.Discard()
}
