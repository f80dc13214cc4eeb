// Package controllers holds the Evaluation controller: it turns an Evaluation
// into one Indexed Job per model, divides rate limits among the running shards,
// follows their progress, and gathers their records into status and NAME-results.
package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/objstore"
)

// Options tune the controller. Zero values take the defaults.
type Options struct {
	// StaleAfter is how long a shard's head may stay unchanged before the shard is
	// taken for dead and its budget share reclaimed. Runners write every few
	// seconds and stop spending when they cannot read the budget for less than this.
	StaleAfter time.Duration
	// ProgressInterval bounds how often progress alone is written to status.
	ProgressInterval time.Duration
	// RecheckAfter is how soon missing references are looked for again.
	RecheckAfter time.Duration
	// ShardRetries is how many times a failed shard is retried (backoffLimitPerIndex).
	ShardRetries int32
	// StorageBudget bounds the records a run stores in the cluster (their JSON,
	// before compression): past it, records are stored without their output.
	// Default cluster.DefaultStorageBudget; negative means unbounded.
	StorageBudget int64
	// Resources are the default requests and limits of runner pods'
	// containers; DefaultPodResources when all are empty.
	Resources PodResources
	// PacerURL is the manager's pacer as runner pods reach it; "" gives them
	// none (each paces its calls on its own).
	PacerURL string
	// NamespaceStorageBudget and ClusterStorageBudget bound the records (their
	// JSON, before compression) the Evaluations of a namespace, and of the
	// cluster, keep: a new run starts only when its StorageBudget fits beside
	// theirs (a run not ended counts its whole budget), else it waits
	// (StorageFull). Defaults cluster.DefaultNamespaceStorageBudget and
	// cluster.DefaultClusterStorageBudget; negative means unbounded.
	NamespaceStorageBudget, ClusterStorageBudget int64
	// ResultsStore, when set, is the cluster's results store: each run's
	// records are committed there, under NAMESPACE/NAME/STARTED-RUN/, when it
	// ends (status.resultsLocation).
	ResultsStore *objstore.Store
	// KeepRunnersFor is how long a run's Jobs, pods and heads are kept once
	// it ended committed to a results store, unless its spec.runner.keepFor
	// says otherwise (tidyCommitted). 0 deletes them at once.
	KeepRunnersFor time.Duration
	// QueueName is the Kueue LocalQueue that admits every run's Jobs unless
	// an Evaluation's spec.scheduling.queueName names another; "" for none.
	QueueName string
	// TracesEndpoint and TracesProtocol are where runner pods send their
	// traces (OTLP) unless an Evaluation's spec.tracing says otherwise; ""
	// sends none.
	TracesEndpoint, TracesProtocol string
}

func (o *Options) defaults() {
	if o.StaleAfter == 0 {
		o.StaleAfter = 30 * time.Second
	}
	if o.ProgressInterval == 0 {
		o.ProgressInterval = 2 * time.Second
	}
	if o.RecheckAfter == 0 {
		o.RecheckAfter = 10 * time.Second
	}
	if o.ShardRetries == 0 {
		o.ShardRetries = 3
	}
	o.Resources.defaults()
	if o.StorageBudget == 0 {
		o.StorageBudget = cluster.DefaultStorageBudget
	}
	if o.NamespaceStorageBudget == 0 {
		o.NamespaceStorageBudget = cluster.DefaultNamespaceStorageBudget
	}
	if o.ClusterStorageBudget == 0 {
		o.ClusterStorageBudget = cluster.DefaultClusterStorageBudget
	}
}

// EvaluationReconciler reconciles Evaluations.
type EvaluationReconciler struct {
	client.Client
	// APIReader reads what the cache does not hold: users' ConfigMaps, Secret and
	// PVC metadata, and record chunks (cached only as metadata).
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// RunnerImage runs shards unless spec.runner.image says otherwise: the
	// manager's own image, which holds the same proctor binary.
	RunnerImage string
	// Kueue says Kueue's Workload API is served: runs with a queue are
	// admitted by it (SetupWithManager finds out).
	Kueue   bool
	Options Options
	// CheckSpec compiles a run as its runner pods will, with the data of the
	// datasets the controller holds (by dataset name), and says what they would
	// refuse. The manager passes the compiler's (compile.CheckData): the
	// controller does not import the runner's program.
	CheckSpec func(ctx context.Context, ev *v1alpha1.Evaluation, data map[string][]byte) error

	heads    *headTracker
	progress *throttle
	// written holds the version each Evaluation's last status write replaced.
	written *versions
	// tallies hold each run's records tallied as its shards succeed.
	tallies  *runningTallies
	reported *nameSet
	// tidied holds, per Evaluation, the ends of runs tidyEnded tidied.
	tidied *nameSet
	hashes *specHashes
	grants *uploadGrants
	stores storeCache
}

// +kubebuilder:rbac:groups=proctor.dev,resources=evaluations,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=proctor.dev,resources=evaluations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=proctor.dev,resources=evaluations/finalizers,verbs=update
// +kubebuilder:rbac:groups=proctor.dev,resources=modelendpoints,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=get;list;watch

// SetupWithManager registers the controller. Children are watched through their
// owner; ConfigMaps only as metadata (shard progress is in annotations), so the
// manager never holds records in memory.
func (r *EvaluationReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.CheckSpec == nil {
		return fmt.Errorf("the Evaluation controller needs CheckSpec")
	}
	r.Options.defaults()
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.heads = newHeadTracker()
	r.progress = newThrottle()
	r.written = newVersions()
	r.tallies = newRunningTallies()
	r.reported = newNameSet()
	r.tidied = newNameSet()
	r.hashes = newSpecHashes()
	r.grants = newUploadGrants()
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Event{}, eventRegardingUID, eventRegarding); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if _, err := mgr.GetRESTMapper().RESTMapping(cluster.WorkloadGVK.GroupKind(), cluster.WorkloadGVK.Version); err == nil {
		// Kueue is installed: its Workloads (owned by the Jobs) say when a
		// queued Job is admitted, waits or was preempted.
		r.Kueue = true
		w := &unstructured.Unstructured{}
		w.SetGroupVersionKind(cluster.WorkloadGVK)
		b = b.Watches(w, handler.EnqueueRequestsFromMapFunc(r.evaluationOfJobChild))
	}
	return b.
		For(&v1alpha1.Evaluation{}).
		Owns(&batchv1.Job{}).
		// Runner pods (owned by the Jobs) and the Job controller's FailedCreate
		// events: what is wrong shows in status within seconds. The manager's
		// cache holds only Proctor's pods and those events (see CacheOptions).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.evaluationOfJobChild), builder.WithPredicates(podJudgementChanged)).
		Watches(&corev1.Event{}, handler.EnqueueRequestsFromMapFunc(r.evaluationOfJobEvent)).
		// A ModelEndpoint made or deleted moves the Evaluations calling through
		// it (Pending, EndpointUnavailable); its status changes do not.
		Watches(&v1alpha1.ModelEndpoint{}, handler.EnqueueRequestsFromMapFunc(r.evaluationsOfEndpoint), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&corev1.ConfigMap{}, builder.OnlyMetadata).
		Owns(&corev1.ServiceAccount{}, builder.OnlyMetadata).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Named("evaluation").
		Complete(r)
}

// step is one named part of a reconcile. It returns false to end the pass early
// (the rest needs something that is not there yet).
type step struct {
	name string
	run  func(context.Context, *pass) (bool, error)
}

// Reconcile brings an Evaluation's children in line with its spec, then writes its
// status once, if it changed, and only then emits events.
func (r *EvaluationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	ev := &v1alpha1.Evaluation{}
	if err := r.Get(ctx, req.NamespacedName, ev); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !ev.DeletionTimestamp.IsZero() {
		// Owner references let the garbage collector remove everything it made.
		return ctrl.Result{}, nil
	}
	if r.written.isReplaced(req.NamespacedName, ev.ResourceVersion) {
		// The cache has not caught up with this manager's last status
		// write: a pass on what it holds would redo what that write
		// recorded (on a run's second pass: start the run again, deleting
		// and making its results ConfigMap while its pods start). The
		// write's watch event brings a pass on the current version.
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	// The CRD leaves fields unset; work from the same defaults a local run
	// applies (runner pods apply them too, so both hash the same run).
	v1alpha1.SetDefaults(&ev.Spec)

	p := newPass(ev, r.Clock.Now())
	steps := []step{
		{"StartRun", r.startRun},
		{"KeepEnded", r.keepEnded},
		{"AdmitStorage", r.admitStorage},
		{"ResolveEndpoints", r.resolveEndpoints},
		{"ClaimResults", r.claimResults},
		{"CheckReferences", r.checkReferences},
		{"CheckQueue", r.checkQueue},
		{"SnapshotDatasets", r.snapshotDatasets},
		{"LoadPlan", r.loadPlan},
		{"EnsureShardObjects", r.ensureShardObjects},
		{"EnsureCacheURLs", r.ensureCacheURLs},
		{"EnsurePermissions", r.ensurePermissions},
		{"EnsurePlanner", r.ensurePlanner},
		{"EnsureBudget", r.ensureBudget},
		{"EnsureJobs", r.ensureJobs},
		{"ObserveAdmission", r.observeAdmissionStep},
		{"ObserveShards", r.observeShards},
		{"TallyShards", r.tallyShards},
		{"ObserveStorage", r.observeStorage},
		{"DivideBudget", r.divideBudget},
		{"Finish", r.finish},
	}
	p.complete = true
	for _, s := range steps {
		cont, err := s.run(ctx, p)
		if err != nil {
			// Write nothing: a half-done pass must not record a phase, nor a run
			// that was not fully started. The retry redoes it from the start.
			return ctrl.Result{}, fmt.Errorf("%s: %w", s.name, err)
		}
		if !cont {
			p.complete = false
			break
		}
	}
	if len(p.conflicts) > 0 {
		// A name may be freed without any event of ours: look again.
		p.requeueAfter(r.Options.RecheckAfter)
	}
	// Foreign objects are reported once each (a head found by every pass would
	// otherwise be reported with every status write).
	fresh := r.reported.fresh(req.NamespacedName, p.ignored)
	if len(fresh) > 0 {
		logger.Info("Ignored objects labelled as the Evaluation's that it does not control", "objects", fresh)
		p.event(corev1.EventTypeWarning, v1alpha1.ReasonForeignObjectIgnored,
			"Ignored %d object(s) labelled as this Evaluation's that it does not control (never read, adopted nor deleted): %s",
			len(fresh), strings.Join(fresh, ", "))
	}
	r.setPhase(p)
	wrote, err := r.writeStatus(ctx, p, logger)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wrote {
		// Events describe changes the status now shows; a pass whose status was
		// not written will emit them when it is.
		r.reported.mark(req.NamespacedName, fresh)
		r.emit(p)
	}
	return p.result, nil
}

// writeStatus writes status if it changed. Progress alone (shards done among
// it) is written at most every progressEvery: shards report every few seconds
// each, and many shards would otherwise mean many writes. Nor is it written
// when the run, at its pace so far, ends before the next one would be due
// (endsWithin): the end's own write follows, and a progress write landing
// just before it held the end back by its length (150-430 ms for a spec of
// thousands of inline samples). Only one is passed over in a row, so a run
// whose last samples drag still shows progress every 2 x progressEvery.
func (r *EvaluationReconciler) writeStatus(ctx context.Context, p *pass, logger logr.Logger) (bool, error) {
	old := &p.ev.Status
	if apiequality.Semantic.DeepEqual(old, p.status) {
		return false, nil
	}
	key := client.ObjectKeyFromObject(p.ev)
	if onlyProgress(old, p.status) {
		every := r.progressEvery(p)
		if wait := r.progress.wait(key, p.now, every); wait > 0 {
			p.requeueAfter(wait)
			return false, nil
		}
		if wait := r.progress.wait(key, p.now, 2*every); wait > 0 && endsWithin(p.status, p.now, every) {
			p.requeueAfter(wait)
			return false, nil
		}
	}
	updated := p.ev.DeepCopy()
	updated.Status = *p.status
	if err := r.Status().Update(ctx, updated); err != nil {
		if apierrors.IsConflict(err) {
			// A newer object is on its way; the next pass will see it.
			p.requeueAfter(time.Second)
			return false, nil
		}
		return false, fmt.Errorf("writing status: %w", err)
	}
	r.progress.wrote(key, p.now)
	r.written.replace(key, p.ev.ResourceVersion)
	recordSamples(old, p.status)
	setPhaseGauge(key, p.status.Phase)
	if old.Phase != p.status.Phase {
		logger.Info("Evaluation changed phase", "from", old.Phase, "to", p.status.Phase, "run", p.status.Run)
	}
	return true, nil
}

// endsWithin reports whether a run, at the pace it has kept since it
// started, finishes its samples within d.
func endsWithin(st *v1alpha1.EvaluationStatus, now time.Time, d time.Duration) bool {
	pr := st.Progress
	if pr == nil || st.StartTime == nil || pr.Completed <= 0 || pr.Completed >= pr.Total {
		return false
	}
	elapsed := now.Sub(st.StartTime.Time)
	if elapsed <= 0 {
		return false
	}
	left := time.Duration(float64(elapsed) * float64(pr.Total-pr.Completed) / float64(pr.Completed))
	return left < d
}

// progressBytesPerSecond bounds what writes of progress alone rewrite in
// etcd for one Evaluation: each write rewrites the whole object, and a spec
// of thousands of inline samples is hundreds of KiB.
const progressBytesPerSecond = 32 << 10

// progressEvery is how often progress alone is written: every
// ProgressInterval, or less often for a large spec.
func (r *EvaluationReconciler) progressEvery(p *pass) time.Duration {
	every := r.Options.ProgressInterval
	if p.hashes != nil {
		every = max(every, time.Duration(p.hashes.SpecBytes)*time.Second/progressBytesPerSecond)
	}
	return every
}

func (r *EvaluationReconciler) forget(key types.NamespacedName) {
	r.heads.forget(key)
	r.progress.forget(key)
	r.written.forget(key)
	r.tallies.forget(key)
	r.reported.forget(key)
	r.tidied.forget(key)
	r.hashes.forget(key)
	forgetPhase(key)
}
