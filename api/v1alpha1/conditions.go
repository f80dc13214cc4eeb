package v1alpha1

// The conditions of an Evaluation's status and the reasons of its conditions
// and events, for clients, tools and tests to use by name.

// Condition types.
const (
	// ConditionReconciling, ConditionStalled and ConditionReady (declared with
	// the endpoints' below) are the conditions kstatus (Flux, Helm, kpt) and
	// kubectl wait read. Reconciling is True while the run is under way or
	// waits (planning, running, suspended, runner pods waiting for room on a
	// node or in the namespace's quota); Stalled is True when it cannot go on
	// without a change (a missing reference, pods that cannot start, a spent
	// budget, a failure, a missed gate); Ready is True only when the run
	// succeeded and met its gate.
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"
	ConditionProgressing = "Progressing"
	ConditionComplete    = "Complete"
	ConditionFailed      = "Failed"
	ConditionSuspended   = "Suspended"
	// ConditionAdmitted, for a run with a Kueue queue (spec.scheduling), is
	// True while Kueue has admitted every runner Job it has, and False
	// (Queued) while one waits for quota or was preempted.
	ConditionAdmitted = "Admitted"
	// ConditionDegraded is True while runner pods cannot start or fail: its
	// reason is the pods' (ImagePullBackOff, CreateContainerConfigError,
	// Unschedulable, FailedCreate, OOMKilled, ConfigurationError, Evicted...).
	ConditionDegraded = "Degraded"
	// ConditionRateLimited is True while a model's server answers 429: calls
	// wait, and no sample fails for it (retry.maxThrottleWait bounds the wait).
	ConditionRateLimited = "RateLimited"
	// ConditionNameConflict is True while an object of a name the run needs
	// exists and is not the Evaluation's (a user's own NAME-results, say): it is
	// left alone, and the run waits until the name is free.
	ConditionNameConflict = "NameConflict"
	// ConditionEndpointUnavailable is True while a ModelEndpoint that models
	// call through is missing (deleted while the run went on) or not Ready:
	// the runner pods hold those models' calls, nothing fails, and the run goes
	// on when the endpoint is back.
	ConditionEndpointUnavailable = "EndpointUnavailable"
)

// Reasons, for conditions and events.
const (
	ReasonStarted = "Started"
	ReasonRunning = "Running"
	ReasonNewRun  = "NewRun"
	// ReasonRescoring: the scoring alone changed, so the new run scores the
	// answers of the run before it again, calling judges only.
	ReasonRescoring      = "Rescoring"
	ReasonPlanning       = "Planning"
	ReasonPlanningFailed = "PlanningFailed"
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonEndpointNotFound: a model's endpointRef names no ModelEndpoint (the
	// run waits in Pending, or, started, holds the model's calls).
	ReasonEndpointNotFound = "EndpointNotFound"
	// ReasonEndpointNotReady: a model's ModelEndpoint is not Ready (its
	// ModelQuota is missing or does not list the namespace): its runner pods
	// wait for it.
	ReasonEndpointNotReady = "EndpointNotReady"
	// ReasonEndpointFound: the missing ModelEndpoints are back.
	ReasonEndpointFound     = "EndpointFound"
	ReasonConfigMapNotFound = "ConfigMapNotFound"
	ReasonPVCNotFound       = "PVCNotFound"
	ReasonInvalidSpec       = "InvalidSpec"
	ReasonSuspended         = "Suspended"
	// ReasonQueued: Kueue holds a runner Job until its ClusterQueue has
	// quota (or after preempting it); ReasonAdmitted: it admitted them all.
	ReasonQueued   = "Queued"
	ReasonAdmitted = "Admitted"
	// ReasonKueueNotInstalled: the run names a Kueue queue on a cluster
	// without Kueue (no Workload API when the manager started).
	ReasonKueueNotInstalled = "KueueNotInstalled"
	ReasonShardFailed       = "ShardFailed"
	ReasonShardsFailed      = "ShardsFailed"
	ReasonCompleted         = "Completed"
	ReasonFailed            = "Failed"
	// ReasonRecovered: the runner pods' problem went away (Degraded is False).
	ReasonRecovered = "Recovered"
	// ReasonRateLimited: a model's server answers 429 (RateLimited is True).
	ReasonRateLimited = "RateLimited"
	// ReasonRateLimitLifted: no model is rate limited any more.
	ReasonRateLimitLifted = "RateLimitLifted"
	// Reasons of pod problems besides the kubelet's own (ImagePullBackOff,
	// CreateContainerConfigError, CreateContainerError, OOMKilled, Evicted,
	// DeadlineExceeded, ...), which are used as they are.
	ReasonUnschedulable      = "Unschedulable"
	ReasonFailedCreate       = "FailedCreate"
	ReasonConfigurationError = "ConfigurationError"
	ReasonRunnerFailed       = "RunnerFailed"
	// ReasonServiceNotReady: a service (spec.services) of a runner pod did
	// not become ready within its readinessProbe's budget; the run fails.
	ReasonServiceNotReady = "ServiceNotReady"
	// ReasonHookFailed: hooks.setup failed, or a slot stayed broken past
	// hooks.repairTimeout.
	ReasonHookFailed = "HookFailed"
	// ReasonBudgetExceeded: spec.budget is spent; no call starts until it is
	// raised, which resumes the run.
	ReasonBudgetExceeded = "BudgetExceeded"
	// ReasonEstimated (event): the planner estimated what the run will cost
	// (status.estimate).
	ReasonEstimated = "Estimated"
	// ReasonEstimateOverBudget (warning event): the run may cost more than
	// spec.budget.maxCost, which would stop it before its end.
	ReasonEstimateOverBudget = "EstimateOverBudget"
	// ReasonResumed: a run that had ended goes on (its budget was raised).
	ReasonResumed = "Resumed"
	// ReasonNameConflict: a name the run needs is taken (NameConflict is True).
	ReasonNameConflict = "NameConflict"
	// ReasonNamesFreed: no name the run needs is taken any more.
	ReasonNamesFreed = "NamesFreed"
	// ReasonSucceeded: Ready is True, the run succeeded (and met its gate).
	ReasonSucceeded = "Succeeded"
	// ReasonRegressionDetected: the run missed spec.gate (status.gate says
	// which rules); it ends Failed.
	ReasonRegressionDetected = "RegressionDetected"
	// ReasonGatePassed (event): the run met spec.gate.
	ReasonGatePassed = "GatePassed"
	// ReasonBaselineNotFound: spec.baseline names an Evaluation or ConfigMap
	// that does not exist, or holds no results the run can read.
	ReasonBaselineNotFound = "BaselineNotFound"
	// ReasonWaitingForBaseline: every sample ran, and the run waits for the
	// baseline Evaluation's results to compare with.
	ReasonWaitingForBaseline = "WaitingForBaseline"
	// ReasonResultsStoreUnavailable: the run's records could not be written
	// to its results store yet (every sample ran, or its shards cannot start
	// writing: its own store's Secret was deleted since it started, say);
	// it is tried again.
	ReasonResultsStoreUnavailable = "ResultsStoreUnavailable"
	// ReasonForeignObjectIgnored: objects labelled as the Evaluation's that it
	// does not control were ignored (neither read, nor deleted).
	ReasonForeignObjectIgnored = "ForeignObjectIgnored"
	// ReasonStorageFull: the Evaluations of the namespace, or of the cluster,
	// store as many records as the manager's storage budget allows: a new run
	// waits (Pending) until older Evaluations are deleted or the budget is
	// raised.
	ReasonStorageFull = "StorageFull"
	// ReasonShardSizeRaised (event): spec.shardSize would have made more
	// shards than a run may (a pod and ConfigMaps each); it was raised.
	ReasonShardSizeRaised = "ShardSizeRaised"
)

// ConditionOutputsTruncated is True once some record's output is not whole: cut
// at cluster.MaxOutputBytes, or not stored because the run's records reached the
// storage budget. Its reason says which.
const ConditionOutputsTruncated = "OutputsTruncated"

// Reasons of ConditionOutputsTruncated.
const (
	ReasonOutputsCut           = "OutputsCut"
	ReasonStorageBudgetReached = "StorageBudgetReached"
)

// The condition of ModelEndpoints and ModelQuotas, and its reasons.
const (
	// ConditionReady is True while Evaluations can call through the endpoint
	// (or the quota's endpoints can share it).
	ConditionReady = "Ready"
	// ReasonBudgetReady: its budget is its own, and divided.
	ReasonBudgetReady = "BudgetReady"
	// ReasonBudgetNameConflict: the ConfigMap its budget needs is not its own.
	ReasonBudgetNameConflict = "BudgetNameConflict"
	// ReasonQuotaNotFound: its quotaRef names no ModelQuota.
	ReasonQuotaNotFound = "QuotaNotFound"
	// ReasonQuotaNotAllowed: its ModelQuota does not list its namespace.
	ReasonQuotaNotAllowed = "QuotaNotAllowed"
	// ReasonWaitingForQuota: its ModelQuota has given it no part yet.
	ReasonWaitingForQuota = "WaitingForQuota"
)

// ConditionLimitsMismatch (of Evaluations, ModelEndpoints and ModelQuotas) is
// True while a provider's rate-limit headers disagree with what is declared:
// the limit it says is not the declared one (calls draw 429s above it, or the
// key is not used as it could be below it), or it counted more calls than
// Proctor sent through the key (someone else uses it). Its message says the
// provider's numbers.
const ConditionLimitsMismatch = "LimitsMismatch"

// Reasons of ConditionLimitsMismatch.
const (
	// ReasonDeclaredLimitDiffers: the provider's limit is not the declared one.
	ReasonDeclaredLimitDiffers = "DeclaredLimitDiffers"
	// ReasonUsageOutsideProctor: the provider counted more than Proctor sent
	// through the key over the last minute.
	ReasonUsageOutsideProctor = "UsageOutsideProctor"
	// ReasonLimitsAgree: the provider's headers agree with what is declared.
	ReasonLimitsAgree = "LimitsAgree"
)
