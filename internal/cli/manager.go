package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/controllers"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/compile"
	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/internal/pacer"
)

type managerOptions struct {
	metricsAddr     string
	metricsSecure   bool
	probeAddr       string
	pprofAddr       string
	leaderElect     bool
	runnerImage     string
	watchNamespaces string
	storageBudget   int64
	nsStorage       int64
	clusterStorage  int64
	pacerAddr       string
	pacerURL        string
	resources       controllers.PodResources
	// The results store (issue 27).
	store, storeEndpoint, storeRegion string
	storePathStyle                    bool
	keepRunnersFor                    time.Duration
	tracesEndpoint, tracesProtocol    string
	queueName                         string
	zap                               zap.Options
}

func newManagerCommand(s streams) *cobra.Command {
	o := &managerOptions{}
	cmd := &cobra.Command{
		Use:   "manager",
		Short: "Run the Proctor operator (the Evaluation controller)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runManager(o, s)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.metricsAddr, "metrics-bind-address", "0", "address of the metrics endpoint (:8443 for HTTPS, :8080 for HTTP, 0 to disable)")
	f.BoolVar(&o.metricsSecure, "metrics-secure", true, "serve metrics over HTTPS, to authenticated and authorized clients only")
	f.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	f.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "address of Go's profiles (/debug/pprof/), to see where the manager spends its CPU and memory (0 to disable)")
	f.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader, so that only one replica reconciles")
	f.StringVar(&o.runnerImage, "runner-image", os.Getenv("PROCTOR_RUNNER_IMAGE"), "image of runner pods, unless an Evaluation names one (default $PROCTOR_RUNNER_IMAGE)")
	f.StringVar(&o.watchNamespaces, "watch-namespaces", "", "comma-separated namespaces to watch (default all)")
	f.StringVar(&o.pacerAddr, "pacer-bind-address", "0", "address of the pacer, which spaces the calls of every runner pod through a rate-limited key (the leader serves it; 0 to disable)")
	f.StringVar(&o.pacerURL, "pacer-url", "", "the pacer's URL as runner pods reach it, e.g. http://proctor-pacer.proctor-system.svc:8082 (required with --pacer-bind-address)")
	f.Int64Var(&o.nsStorage, "namespace-storage-budget", cluster.DefaultNamespaceStorageBudget, "bytes of records the Evaluations of one namespace may keep in the cluster together; a new run waits (StorageFull) until its --storage-budget fits. 0: unbounded")
	f.Int64Var(&o.clusterStorage, "cluster-storage-budget", cluster.DefaultClusterStorageBudget, "bytes of records every Evaluation of the cluster may keep together; a new run waits (StorageFull) until its --storage-budget fits. 0: unbounded")
	f.Int64Var(&o.storageBudget, "storage-budget", cluster.DefaultStorageBudget, "bytes of records one run may store in the cluster (their JSON, before compression); past it, outputs are not stored. 0: unbounded")
	f.StringVar(&o.store, "results-store", "", "an S3-compatible location (s3://BUCKET/PREFIX) where each run's records are committed when it ends, and kept after its Evaluation is deleted; credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (empty: the records stay in ConfigMaps only)")
	f.StringVar(&o.storeEndpoint, "results-store-endpoint", "", "the results store's URL (http(s)://host:port), for stores other than AWS S3 (default $AWS_ENDPOINT_URL_S3)")
	f.StringVar(&o.storeRegion, "results-store-region", "", "the results store's region (default $AWS_REGION, else us-east-1)")
	f.DurationVar(&o.keepRunnersFor, "keep-runners-for", time.Hour, "how long a run's runner Jobs, their pods and its shard ConfigMaps are kept once its records are committed to a results store (an Evaluation's spec.runner.keepFor overrides it); 0 deletes them at once")
	f.StringVar(&o.queueName, "default-queue-name", "", "the Kueue LocalQueue (in each Evaluation's namespace) that admits every run's Jobs unless its spec.scheduling.queueName names another; empty: none (Jobs start at once)")
	f.StringVar(&o.tracesEndpoint, "runner-traces-endpoint", "", "the OTLP receiver runner pods send traces to (a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it: http://otel-collector.monitoring:4318), unless an Evaluation's spec.tracing names one; empty: none")
	f.StringVar(&o.tracesProtocol, "runner-traces-protocol", "http/protobuf", "OTLP's transport to --runner-traces-endpoint: http/protobuf or grpc")
	f.BoolVar(&o.storePathStyle, "results-store-path-style", false, "address the bucket as http://host/BUCKET rather than http://BUCKET.host (on whenever an endpoint is set)")
	o.resources = controllers.DefaultPodResources()
	for _, x := range []struct {
		name string
		rr   *corev1.ResourceRequirements
		what string
	}{
		{"runner", &o.resources.Runner, "of runner containers, for what spec.runner.resources leaves unset"},
		{"agent", &o.resources.Agent, "of agent containers, for what agent.resources leaves unset"},
		{"init", &o.resources.Init, "of the init container that installs proctor into agent pods"},
	} {
		f.Var(&resourceList{&x.rr.Requests}, x.name+"-requests", "default requests "+x.what+" (name=quantity,...; empty: none)")
		f.Var(&resourceList{&x.rr.Limits}, x.name+"-limits", "default limits "+x.what+" (name=quantity,...; empty: none)")
	}
	gofs := flag.NewFlagSet("zap", flag.ContinueOnError)
	o.zap.BindFlags(gofs)
	f.AddGoFlagSet(gofs)
	return cmd
}

func runManager(o *managerOptions, s streams) error {
	if o.runnerImage == "" {
		return invalid(errors.New("--runner-image (or PROCTOR_RUNNER_IMAGE) is required: the image runner pods use"))
	}
	if p := o.tracesProtocol; p != string(v1alpha1.TracingProtocolHTTP) && p != string(v1alpha1.TracingProtocolGRPC) {
		return invalid(fmt.Errorf("--runner-traces-protocol: %q is not http/protobuf or grpc", p))
	}
	if u := o.tracesEndpoint; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return invalid(fmt.Errorf("--runner-traces-endpoint: %q is not an http:// or https:// URL", u))
	}
	for name, rr := range map[string]corev1.ResourceRequirements{"runner": o.resources.Runner, "agent": o.resources.Agent, "init": o.resources.Init} {
		for r, req := range rr.Requests {
			if lim, ok := rr.Limits[r]; ok && req.Cmp(lim) > 0 {
				return invalid(fmt.Errorf("--%s-requests: %s %s is more than --%s-limits %s", name, r, req.String(), name, lim.String()))
			}
		}
	}
	if pacing := o.pacerAddr != "" && o.pacerAddr != "0"; pacing != (o.pacerURL != "") {
		return invalid(errors.New("--pacer-bind-address and --pacer-url go together: the pacer serves at the first, runner pods reach it at the second"))
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap), zap.WriteTo(s.errOut)))
	log := ctrl.Log.WithName("setup")
	var store *objstore.Store
	if o.store != "" {
		loc, err := objstore.ParseURL(o.store)
		if err != nil {
			return invalid(fmt.Errorf("--results-store: %w", err))
		}
		if store, err = objstore.Open(context.Background(), loc, objstore.Options{Endpoint: o.storeEndpoint, Region: o.storeRegion, PathStyle: o.storePathStyle}); err != nil {
			return invalid(fmt.Errorf("--results-store: %w", err))
		}
		log.Info("Committing runs' records to the results store", "location", loc.String(), "endpoint", store.Endpoint())
	} else if o.storeEndpoint != "" || o.storeRegion != "" || o.storePathStyle {
		return invalid(errors.New("--results-store-endpoint, --results-store-region and --results-store-path-style need --results-store"))
	}
	if o.keepRunnersFor < 0 {
		return invalid(fmt.Errorf("--keep-runners-for=%v: must not be negative", o.keepRunnersFor))
	}

	scheme := newScheme()
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return invalid(fmt.Errorf("connecting to the cluster: %w", err))
	}
	metrics := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.metricsSecure}
	if o.metricsSecure {
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metrics,
		HealthProbeBindAddress:        o.probeAddr,
		PprofBindAddress:              o.pprofAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              "manager.proctor.dev",
		LeaderElectionReleaseOnCancel: true,
		Cache:                         CacheOptions(o.watchNamespaces),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	r := &controllers.EvaluationReconciler{
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		Scheme:      mgr.GetScheme(),
		Recorder:    mgr.GetEventRecorder("proctor"),
		RunnerImage: o.runnerImage,
		CheckSpec:   compile.CheckData,
		Options: controllers.Options{StorageBudget: storageBudgetOption(o.storageBudget), Resources: o.resources, PacerURL: o.pacerURL,
			NamespaceStorageBudget: storageBudgetOption(o.nsStorage), ClusterStorageBudget: storageBudgetOption(o.clusterStorage),
			ResultsStore: store, KeepRunnersFor: o.keepRunnersFor, TracesEndpoint: o.tracesEndpoint, TracesProtocol: o.tracesProtocol,
			QueueName: o.queueName},
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the controller: %w", err)
	}
	er := &controllers.ModelEndpointReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorder("proctor")}
	if err := er.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the ModelEndpoint controller: %w", err)
	}
	qr := &controllers.ModelQuotaReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme()}
	if err := qr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the ModelQuota controller: %w", err)
	}
	if o.pacerURL != "" {
		p, err := NewPacer(mgr, o.pacerAddr)
		if err != nil {
			return err
		}
		if err := mgr.Add(p); err != nil {
			return fmt.Errorf("adding the pacer: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	log.Info("Starting the manager", "runnerImage", o.runnerImage, "leaderElection", o.leaderElect,
		"runnerRequests", (&resourceList{&o.resources.Runner.Requests}).String(), "runnerLimits", (&resourceList{&o.resources.Runner.Limits}).String(),
		"agentRequests", (&resourceList{&o.resources.Agent.Requests}).String(), "agentLimits", (&resourceList{&o.resources.Agent.Limits}).String())
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	return nil
}

// storageBudgetOption maps the flag (0: unbounded) to controllers.Options
// (0: the default, negative: unbounded).
func storageBudgetOption(flag int64) int64 {
	if flag <= 0 {
		return -1
	}
	return flag
}

// CacheOptions keep the manager's caches to what Proctor made (labelled
// managed-by=proctor: runner pods too), in the watched namespaces; of Events,
// only the Job controller's FailedCreate (pods refused by a ResourceQuota or
// Pod Security), which no Job condition shows.
func CacheOptions(watchNamespaces string) cache.Options {
	managed := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{cluster.LabelManagedBy: cluster.ManagedBy})}
	o := cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{
		&batchv1.Job{}:           managed,
		&corev1.ConfigMap{}:      managed,
		&corev1.ServiceAccount{}: managed,
		&rbacv1.Role{}:           managed,
		&rbacv1.RoleBinding{}:    managed,
		&corev1.Pod{}:            {Label: managed.Label, Transform: controllers.TrimPod},
		&corev1.Event{}:          {Field: fields.SelectorFromSet(fields.Set{"involvedObject.kind": "Job", "reason": "FailedCreate"})},
	}}
	if watchNamespaces != "" {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range strings.Split(watchNamespaces, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				o.DefaultNamespaces[ns] = cache.Config{}
			}
		}
	}
	return o
}

// resourceList is a flag holding requests or limits: cpu=50m,memory=64Mi.
// Empty sets none.
type resourceList struct{ l *corev1.ResourceList }

func (r *resourceList) Type() string { return "resources" }

func (r *resourceList) String() string {
	if r.l == nil || len(*r.l) == 0 {
		return ""
	}
	var parts []string
	for name, q := range *r.l {
		parts = append(parts, string(name)+"="+q.String())
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func (r *resourceList) Set(s string) error {
	out := corev1.ResourceList{}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		name, value, ok := strings.Cut(item, "=")
		if !ok || name == "" {
			return fmt.Errorf("%q is not name=quantity", item)
		}
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if q.Sign() < 0 {
			return fmt.Errorf("%s: %s is negative", name, value)
		}
		out[corev1.ResourceName(name)] = q
	}
	*r.l = out
	return nil
}

// NewPacer is the manager's pacer, listening on addr: buckets resolved from
// the manager's cache, runner pods' tokens checked by TokenReview for the
// pacer's audience (cached for a minute).
func NewPacer(mgr ctrl.Manager, addr string) (*pacer.Server, error) {
	authn, err := authenticationv1.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	auth, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                 time.Minute,
		TokenAccessReviewClient:  authn,
		TokenAccessReviewTimeout: 10 * time.Second,
		APIAudiences:             authenticator.Audiences{cluster.PacerAudience},
		WebhookRetryBackoff:      &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5},
	}.New()
	if err != nil {
		return nil, fmt.Errorf("the pacer's authenticator: %w", err)
	}
	return &pacer.Server{Addr: addr, Resolver: pacer.CacheResolver{Reader: mgr.GetClient()}, Authenticator: auth,
		Log: mgr.GetLogger().WithName("pacer")}, nil
}
