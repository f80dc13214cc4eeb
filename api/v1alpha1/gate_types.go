package v1alpha1

// Baseline names the earlier result a run is compared with: exactly one of
// evaluation, configMap or path. Samples are paired by model, dataset and id.
// +kubebuilder:validation:XValidation:rule=`(has(self.evaluation) && size(self.evaluation) != 0 ? 1 : 0) + (has(self.configMap) && size(self.configMap) != 0 ? 1 : 0) + (has(self.path) && size(self.path) != 0 ? 1 : 0) == 1`,message="baseline: exactly one of evaluation, configMap or path must be set"
type Baseline struct {
	// evaluation names an Evaluation in this namespace whose results (its
	// status.resultsConfigMap) are the baseline. The run waits at its end
	// until that Evaluation has results.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Evaluation string `json:"evaluation,omitempty"`

	// configMap names a ConfigMap in this namespace that holds results as an
	// Evaluation's NAME-results does (summary.json and the records): a copy
	// kept as the release baseline, say.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ConfigMap string `json:"configMap,omitempty"`

	// path is a results directory written by proctor run (its results.jsonl),
	// relative to the Evaluation file: for local runs only.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule=`self == ''`,message="baseline.path is for local runs (proctor run) only: in a cluster, use baseline.evaluation or baseline.configMap"
	Path string `json:"path,omitempty"`

	// model is the baseline's model every model is compared with, to gate a
	// new model against the one it replaces. Default: the baseline's model of
	// the same name.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Model string `json:"model,omitempty"`
}

// Gate is what a run's results must meet. A run that misses it ends Failed,
// with reason RegressionDetected: Ready stays False and Stalled is True, and
// proctor run exits with code 3.
type Gate struct {
	// rules are checked for every model and dataset they select; each rule
	// needs min or maxDrop, or both.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +required
	Rules []GateRule `json:"rules"`

	// significance is the level of the paired tests behind maxDrop: a drop
	// fails the gate only if its p-value is below it. Default 0.05.
	// +optional
	// +kubebuilder:validation:ExclusiveMinimum=true
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=0.5
	Significance *Number `json:"significance,omitempty"`
}

// GateRule bounds one metric.
// +kubebuilder:validation:XValidation:rule=`has(self.min) || has(self.maxDrop)`,message="a gate rule needs min or maxDrop"
type GateRule struct {
	// metric is a metric of spec.scoring (a scorer's name, else its type).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Metric string `json:"metric"`

	// model limits the rule to one evaluated model. Default: every model.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Model string `json:"model,omitempty"`

	// dataset limits the rule to one dataset. Default: every dataset.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Dataset string `json:"dataset,omitempty"`

	// min is the lowest mean score the metric may have, errored samples
	// counting 0. Scores are between 0 and 1, so is min: a gate no run could
	// pass is refused before any is paid for.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	Min *Number `json:"min,omitempty"`

	// maxDrop is how far the metric's mean may fall below the baseline's, on
	// the samples both ran (in the metric's units: 0.02 is two points of
	// accuracy). A larger drop fails the gate when it is significant (the
	// paired test's p-value is below gate.significance); 0 fails any
	// significant drop. Needs spec.baseline.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	MaxDrop *Number `json:"maxDrop,omitempty"`
}

// DefaultSignificance is gate.significance's default.
const DefaultSignificance = 0.05

// GateStatus is how a run fared against its gate.
type GateStatus struct {
	// passed is true when every rule held.
	// +required
	Passed bool `json:"passed"`

	// violations say which rules did not hold, one line each (at most 32).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=1024
	Violations []string `json:"violations,omitempty"`

	// incomplete says, when set, why there is no verdict: the run did not
	// finish every sample (stopped by its budget, say), and a gate judges
	// whole runs only; passed is then false.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Incomplete string `json:"incomplete,omitempty"`
}

// ComparisonStatus compares a run with its baseline.
type ComparisonStatus struct {
	// baseline says what the run was compared with: evaluation/NAME,
	// configMap/NAME or a path, and the baseline's run.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	Baseline string `json:"baseline"`

	// results has one entry per model and dataset.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=2048
	Results []ComparedResult `json:"results,omitempty"`
}

// ComparedResult compares one model on one dataset with the baseline.
type ComparedResult struct {
	// model is the evaluated model.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Model string `json:"model"`

	// baselineModel is the baseline's model it is compared with.
	// +required
	// +kubebuilder:validation:MaxLength=63
	BaselineModel string `json:"baselineModel"`

	// dataset is the dataset's name.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Dataset string `json:"dataset"`

	// paired counts the samples both runs have.
	// +required
	Paired int64 `json:"paired"`

	// unmatched counts this run's samples the baseline lacks.
	// +required
	Unmatched int64 `json:"unmatched"`

	// baselineUnmatched counts the baseline's samples this run lacks.
	// +required
	BaselineUnmatched int64 `json:"baselineUnmatched"`

	// byPosition says both runs' ids are the samples' positions (records
	// without ids, from before ids were hashes of their content): a line
	// added or removed pairs one question with another.
	// +optional
	ByPosition bool `json:"byPosition,omitempty"`

	// notes say what a reader must know to trust the comparison: nothing
	// paired, few samples paired, pairing by position.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=1024
	Notes []string `json:"notes,omitempty"`

	// metrics compare each metric on the paired samples.
	// +optional
	// +listType=map
	// +listMapKey=metric
	// +kubebuilder:validation:MaxItems=32
	Metrics []MetricComparison `json:"metrics,omitempty"`
}

// MetricComparison is a metric's paired difference from the baseline. Numbers
// have four decimals, the p-value six.
type MetricComparison struct {
	// metric is the metric's name.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Metric string `json:"metric"`

	// baseline is the baseline's mean on the paired samples.
	// +required
	// +kubebuilder:validation:MaxLength=32
	Baseline string `json:"baseline"`

	// current is this run's mean on the paired samples.
	// +required
	// +kubebuilder:validation:MaxLength=32
	Current string `json:"current"`

	// diff is current minus baseline.
	// +required
	// +kubebuilder:validation:MaxLength=32
	Diff string `json:"diff"`

	// lo and hi bound diff's 95% confidence interval.
	// +required
	// +kubebuilder:validation:MaxLength=32
	Lo string `json:"lo"`

	// hi is the interval's upper bound.
	// +required
	// +kubebuilder:validation:MaxLength=32
	Hi string `json:"hi"`

	// pValue is the paired test's two-sided p-value.
	// +required
	// +kubebuilder:validation:MaxLength=32
	PValue string `json:"pValue"`

	// test names the paired test: mcnemar (McNemar's exact test, for scores
	// of 0 or 1) or bootstrap (a paired bootstrap of the mean difference).
	// +required
	// +kubebuilder:validation:Enum=mcnemar;bootstrap
	Test string `json:"test"`
}

// SignificanceLevel is the gate's significance level (its default if unset).
func (g *Gate) SignificanceLevel() float64 {
	if g == nil || g.Significance == nil {
		return DefaultSignificance
	}
	v, err := g.Significance.Float64()
	if err != nil {
		return DefaultSignificance
	}
	return v
}
