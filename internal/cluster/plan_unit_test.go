package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

func inline(n int) []runtime.RawExtension {
	out := make([]runtime.RawExtension, n)
	for i := range out {
		out[i] = runtime.RawExtension{Raw: []byte(`{"input":"q","expected":"a"}`)}
	}
	return out
}

func baseSpec() *v1alpha1.EvaluationSpec {
	spec := &v1alpha1.EvaluationSpec{
		Datasets: []v1alpha1.Dataset{{Name: "d", Source: v1alpha1.DatasetSource{Inline: inline(3)}}},
		Models: []v1alpha1.Model{
			{Name: "small", Provider: v1alpha1.ProviderOpenAI, Model: "gpt", BaseURL: "http://llm/v1", RateLimit: &v1alpha1.RateLimit{RequestsPerMinute: 60}},
			{Name: "judge", Provider: v1alpha1.ProviderOpenAI, Model: "gpt-j", BaseURL: "http://llm/v1"},
		},
		Scoring: []v1alpha1.Scorer{{Type: v1alpha1.ScorerExactMatch}, {Type: v1alpha1.ScorerJudge, Judge: &v1alpha1.Judge{Model: "judge"}}},
	}
	v1alpha1.SetDefaults(spec)
	return spec
}

func TestRunID(t *testing.T) {
	base := SpecHash(baseSpec())
	if len(base) != 8 || strings.Trim(base, "0123456789abcdef") != "" {
		t.Fatalf("RunID = %q, want 8 hex digits", base)
	}
	if again := SpecHash(baseSpec()); again != base {
		t.Fatalf("RunID is not stable: %q then %q", base, again)
	}

	same := []struct {
		name string
		edit func(*v1alpha1.EvaluationSpec)
	}{
		{"suspend", func(s *v1alpha1.EvaluationSpec) { s.Suspend = ptr.To(true) }},
		{"unsuspend", func(s *v1alpha1.EvaluationSpec) { s.Suspend = ptr.To(false) }},
		{"parallelism", func(s *v1alpha1.EvaluationSpec) { s.Parallelism = ptr.To[int32](50) }},
		{"rate limit changed", func(s *v1alpha1.EvaluationSpec) { s.Models[0].RateLimit.RequestsPerMinute = 6000 }},
		{"rate limit removed", func(s *v1alpha1.EvaluationSpec) { s.Models[0].RateLimit = nil }},
		{"rate limit added", func(s *v1alpha1.EvaluationSpec) {
			s.Models[1].RateLimit = &v1alpha1.RateLimit{InputTokensPerMinute: 1000}
		}},
		{"budget added", func(s *v1alpha1.EvaluationSpec) {
			s.Budget = &v1alpha1.Budget{MaxCost: ptr.To(v1alpha1.Number("12.50"))}
		}},
		{"pricing added", func(s *v1alpha1.EvaluationSpec) {
			s.Models[0].Pricing = &v1alpha1.Pricing{InputPerMillion: "2", OutputPerMillion: "8"}
		}},
	}
	for _, tc := range same {
		spec := baseSpec()
		tc.edit(spec)
		before := spec.DeepCopy()
		if got := SpecHash(spec); got != base {
			t.Errorf("%s: RunID changed (%s -> %s); the running run should change in place", tc.name, base, got)
		}
		if diff := cmp.Diff(before, spec); diff != "" {
			t.Errorf("%s: RunID modified the spec (-before +after):\n%s", tc.name, diff)
		}
	}

	changed := []struct {
		name string
		edit func(*v1alpha1.EvaluationSpec)
	}{
		{"a sample", func(s *v1alpha1.EvaluationSpec) {
			s.Datasets[0].Source.Inline[1].Raw = []byte(`{"input":"q2","expected":"a"}`)
		}},
		{"a dataset added", func(s *v1alpha1.EvaluationSpec) {
			s.Datasets = append(s.Datasets, v1alpha1.Dataset{Name: "e", Source: v1alpha1.DatasetSource{URL: "https://x/e.jsonl"}})
		}},
		{"dataset limit", func(s *v1alpha1.EvaluationSpec) { s.Datasets[0].Limit = 2 }},
		{"dataset fields", func(s *v1alpha1.EvaluationSpec) { s.Datasets[0].Fields = &v1alpha1.FieldMapping{Input: "question"} }},
		{"model id", func(s *v1alpha1.EvaluationSpec) { s.Models[0].Model = "gpt-2" }},
		{"base URL", func(s *v1alpha1.EvaluationSpec) { s.Models[0].BaseURL = "http://other/v1" }},
		{"parameters", func(s *v1alpha1.EvaluationSpec) {
			s.Models[0].Parameters = &v1alpha1.Parameters{Seed: ptr.To[int64](7)}
		}},
		{"a model added", func(s *v1alpha1.EvaluationSpec) {
			s.Models = append(s.Models, v1alpha1.Model{Name: "big", Provider: v1alpha1.ProviderOpenAI, Model: "g", BaseURL: "http://llm/v1"})
		}},
		{"prompt", func(s *v1alpha1.EvaluationSpec) { s.Prompt.Template = "Q: {{ .Input }}" }},
		{"system prompt", func(s *v1alpha1.EvaluationSpec) { s.Prompt.System = "Be brief." }},
		{"scorer normalization", func(s *v1alpha1.EvaluationSpec) { s.Scoring[0].Normalize = []v1alpha1.Normalizer{"trim"} }},
		{"judge rubric", func(s *v1alpha1.EvaluationSpec) { s.Scoring[1].Judge.Rubric = "Grade it." }},
		{"shard size", func(s *v1alpha1.EvaluationSpec) { s.ShardSize = ptr.To[int32](7) }},
		{"cache", func(s *v1alpha1.EvaluationSpec) { s.Cache.Enabled = true }},
	}
	seen := map[string]string{}
	for _, tc := range changed {
		spec := baseSpec()
		tc.edit(spec)
		got := SpecHash(spec)
		if got == base {
			t.Errorf("%s: RunID unchanged; this edit decides the results", tc.name)
		}
		if prev, dup := seen[got]; dup {
			t.Errorf("%s and %s give the same RunID %s", prev, tc.name, got)
		}
		seen[got] = tc.name
	}
}

// The pod template (runner settings) is fixed in a run's Jobs: editing it
// starts a new run. Pacing (concurrency, retry, timeout) is read by each runner
// pod as it starts, and changes the run in place, as it leaves a local run's
// checkpoint valid.
func TestRunIDRunnerAndPacingEdits(t *testing.T) {
	base := SpecHash(baseSpec())
	newRun := map[string]func(*v1alpha1.EvaluationSpec){
		"runner resources": func(s *v1alpha1.EvaluationSpec) {
			s.Runner = &v1alpha1.Runner{Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}}
		},
		"runner tolerations": func(s *v1alpha1.EvaluationSpec) {
			s.Runner = &v1alpha1.Runner{Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}}
		},
	}
	inPlace := map[string]func(*v1alpha1.EvaluationSpec){
		"concurrency":        func(s *v1alpha1.EvaluationSpec) { s.Concurrency = ptr.To[int32](3) },
		"model concurrency":  func(s *v1alpha1.EvaluationSpec) { s.Models[0].Concurrency = ptr.To[int32](3) },
		"timeout per sample": func(s *v1alpha1.EvaluationSpec) { s.TimeoutPerSample = &v1alpha1.Timeout{Duration: time.Hour} },
		"retry":              func(s *v1alpha1.EvaluationSpec) { s.Retry = &v1alpha1.RetryPolicy{MaxAttempts: ptr.To[int32](9)} },
		"stall timeout": func(s *v1alpha1.EvaluationSpec) {
			s.Runner = &v1alpha1.Runner{StallTimeout: &v1alpha1.Timeout{Duration: time.Hour}}
		},
		"runners kept for": func(s *v1alpha1.EvaluationSpec) {
			s.Runner = &v1alpha1.Runner{KeepFor: &v1alpha1.Retention{Duration: 0}}
		},
	}
	for name, edit := range newRun {
		spec := baseSpec()
		edit(spec)
		if SpecHash(spec) == base {
			t.Errorf("%s: RunID unchanged, want a new run", name)
		}
	}
	for name, edit := range inPlace {
		spec := baseSpec()
		edit(spec)
		if SpecHash(spec) != base {
			t.Errorf("%s: RunID changed, want the run changed in place", name)
		}
	}
}

func TestRunIDIgnoresInlineKeyOrder(t *testing.T) {
	a, b := baseSpec(), baseSpec()
	a.Datasets[0].Source.Inline = []runtime.RawExtension{{Raw: []byte(`{"id":"1","input":"x"}`)}}
	b.Datasets[0].Source.Inline = []runtime.RawExtension{{Raw: []byte(`{"input": "x", "id": "1"}`)}}
	if SpecHash(a) != SpecHash(b) {
		t.Error("the same inline sample encoded differently changed the RunID")
	}
}

func TestDefaultShardSize(t *testing.T) {
	cases := []struct {
		totals map[string]int
		want   int
	}{
		{nil, 100},
		{map[string]int{"d": 0}, 100},
		{map[string]int{"d": 10}, 100},
		{map[string]int{"d": 100_000}, 100},
		{map[string]int{"d": 100_001}, 101},
		{map[string]int{"d": 60_000, "e": 90_000}, 150},
		{map[string]int{"d": 10_000_000}, 10_000},
	}
	for _, tc := range cases {
		got := DefaultShardSize(tc.totals)
		if got != tc.want {
			t.Errorf("DefaultShardSize(%v) = %d, want %d", tc.totals, got, tc.want)
		}
		// At most about a thousand shards per model.
		n := len(Plan{ShardSize: got, Totals: tc.totals}.Shards(specWith(tc.totals), "m"))
		if n > 1000+len(tc.totals) {
			t.Errorf("DefaultShardSize(%v) gives %d shards", tc.totals, n)
		}
	}
}

func specWith(totals map[string]int) *v1alpha1.EvaluationSpec {
	spec := &v1alpha1.EvaluationSpec{}
	for _, name := range []string{"d", "e", "f"} {
		if _, ok := totals[name]; ok {
			spec.Datasets = append(spec.Datasets, v1alpha1.Dataset{Name: name})
		}
	}
	return spec
}

func TestPlanShards(t *testing.T) {
	spec := &v1alpha1.EvaluationSpec{Datasets: []v1alpha1.Dataset{{Name: "d"}, {Name: "empty"}, {Name: "e"}, {Name: "unplanned"}}}
	plan := Plan{ShardSize: 5, Totals: map[string]int{"d": 12, "empty": 0, "e": 5}}
	want := []Shard{
		{Model: "m", Dataset: "d", Index: 0, Start: 0, End: 5},
		{Model: "m", Dataset: "d", Index: 1, Start: 5, End: 10},
		{Model: "m", Dataset: "d", Index: 2, Start: 10, End: 12},
		{Model: "m", Dataset: "e", Index: 3, Start: 0, End: 5},
	}
	if diff := cmp.Diff(want, plan.Shards(spec, "m")); diff != "" {
		t.Errorf("Shards (-want +got):\n%s", diff)
	}
	if got := plan.Total(); got != 17 {
		t.Errorf("Total = %d, want 17", got)
	}
	// Every model has the same shards, under its own name.
	other := plan.Shards(spec, "other")
	for i := range other {
		if other[i].Model != "other" || other[i].Index != want[i].Index || other[i].Start != want[i].Start {
			t.Errorf("shard %d of another model: %+v", i, other[i])
		}
	}
	if got := want[1].Key(); got != "m/1" {
		t.Errorf("Key = %q", got)
	}
	if got := (Plan{ShardSize: 5}).Shards(spec, "m"); got != nil {
		t.Errorf("an empty plan has shards %v", got)
	}
}

func TestSubjects(t *testing.T) {
	spec := baseSpec()
	spec.Models = append(spec.Models, v1alpha1.Model{Name: "big"})
	if diff := cmp.Diff([]string{"small", "big"}, Subjects(spec)); diff != "" {
		t.Errorf("Subjects: judges are not evaluated (-want +got):\n%s", diff)
	}
}

func TestPlanAnnotations(t *testing.T) {
	spec := &v1alpha1.EvaluationSpec{ShardSize: ptr.To[int32](7)}
	cases := []struct {
		name        string
		annotations map[string]string
		want        *Plan
		wantFailed  string
		wantErr     bool
	}{
		{name: "not planned yet", annotations: map[string]string{}},
		{name: "planned", annotations: func() map[string]string {
			a := map[string]string{}
			SetPlan(a, NewPlan(spec, map[string]int{"d": 20}, -5))
			return a
		}(), want: &Plan{ShardSize: 7, Totals: map[string]int{"d": 20}}},
		{name: "failed", annotations: map[string]string{AnnotationPlanError: "d: sha256 mismatch", AnnotationPlan: `{"shardSize":1}`}, wantFailed: "d: sha256 mismatch"},
		{name: "damaged", annotations: map[string]string{AnnotationPlan: `{"shardSize":`}, wantErr: true},
	}
	for _, tc := range cases {
		got, failed, err := ParsePlan(tc.annotations)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err = %v, want error %v", tc.name, err, tc.wantErr)
		}
		if failed != tc.wantFailed {
			t.Errorf("%s: failed = %q, want %q", tc.name, failed, tc.wantFailed)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: plan (-want +got):\n%s", tc.name, diff)
		}
	}
	if got := NewPlan(&v1alpha1.EvaluationSpec{}, map[string]int{"d": 250_000}, 1<<20); got.ShardSize != 250 || got.StorageBytes != 1<<20 {
		t.Errorf("NewPlan without shardSize = %+v, want the default shard size 250 and the storage budget", got)
	}
}

// TestPlanBoundsTheShards: shardSize 1 over 1,000 samples made a pod and a
// head ConfigMap a sample; a run makes at most ShardLimit shards a model
// (MaxShards, and ShardsPerWorker for each of its workers, as long as that
// keeps shards within MaxRaisedShardSize), the shard size raised (and said)
// until they fit.
func TestPlanBoundsTheShards(t *testing.T) {
	for _, tc := range []struct {
		name        string
		shardSize   int32
		parallelism int32 // 0: unset, the default 4
		totals      map[string]int
		want        int // shard size
	}{
		{"within the bound", 10, 32, map[string]int{"a": 1000}, 10},
		{"one a sample", 1, 32, map[string]int{"a": 1000}, 4},
		{"two datasets", 1, 32, map[string]int{"a": 1000, "b": 7}, 4},
		{"many small datasets", 1, 32, map[string]int{"a": 300, "b": 300, "c": 3}, 3},
		{"8 a worker", 15, 4, map[string]int{"a": 3000}, 95},
		{"8 a worker, parallelism unset", 15, 0, map[string]int{"a": 3000}, 95},
		{"8 a worker, within", 150, 4, map[string]int{"a": 3000}, 150},
		{"one worker", 10, 1, map[string]int{"a": 100}, 13},
		{"8 a worker, no further than 1,000", 10, 4, map[string]int{"a": 100_000}, 1000},
		{"a million: 256", 10, 4, map[string]int{"a": 1_000_000}, 3921},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &v1alpha1.EvaluationSpec{ShardSize: &tc.shardSize}
			if tc.parallelism > 0 {
				spec.Parallelism = &tc.parallelism
			}
			for _, name := range []string{"a", "b", "c"} {
				if _, ok := tc.totals[name]; ok {
					spec.Datasets = append(spec.Datasets, v1alpha1.Dataset{Name: name})
				}
			}
			plan := NewPlan(spec, tc.totals, 0)
			if plan.ShardSize != tc.want {
				t.Errorf("shard size %d, want %d", plan.ShardSize, tc.want)
			}
			n, limit := len(plan.Shards(spec, "m")), ShardLimit(spec)
			if n > MaxShards || (n > limit && plan.ShardSize < MaxRaisedShardSize) {
				t.Errorf("%d shards of %d, more than %d (of less than %d) or %d", n, plan.ShardSize, limit, MaxRaisedShardSize, MaxShards)
			}
			if raised := plan.ShardSize != int(tc.shardSize); raised != (plan.Requested == int(tc.shardSize)) {
				t.Errorf("requested %d, shard size %d", plan.Requested, plan.ShardSize)
			}
		})
	}
}

// TestAnswersHash: what decides a model's answers is hashed apart from the
// scoring, so that a scoring edit re-scores them; every other edit that
// changes the requests changes it, and ScorerHashes say which scorer changed.
func TestAnswersHash(t *testing.T) {
	base := func() *v1alpha1.EvaluationSpec {
		return &v1alpha1.EvaluationSpec{
			Datasets: []v1alpha1.Dataset{{Name: "d", Source: v1alpha1.DatasetSource{Inline: inline(3)}}},
			Models: []v1alpha1.Model{
				{Name: "small", Provider: v1alpha1.ProviderOpenAI, Model: "gpt", BaseURL: "http://llm/v1"},
				{Name: "grader", Provider: v1alpha1.ProviderOpenAI, Model: "judge", BaseURL: "http://llm/v1"},
			},
			Prompt:  &v1alpha1.Prompt{Template: "{{ .Input }}"},
			Scoring: []v1alpha1.Scorer{{Type: v1alpha1.ScorerExactMatch}, {Type: v1alpha1.ScorerJudge, Name: "judged", Judge: &v1alpha1.Judge{Model: "grader"}}},
		}
	}
	for _, tc := range []struct {
		name           string
		edit           func(*v1alpha1.EvaluationSpec)
		answersChanged bool
		scorersChanged []string
	}{
		{"a normalizer", func(s *v1alpha1.EvaluationSpec) { s.Scoring[0].Normalize = []v1alpha1.Normalizer{"lowercase"} }, false, []string{"exact_match"}},
		{"the judge's model", func(s *v1alpha1.EvaluationSpec) { s.Models[1].Model = "judge-2" }, false, []string{"judged"}},
		{"a rubric", func(s *v1alpha1.EvaluationSpec) { s.Scoring[1].Judge.Rubric = "strict" }, false, []string{"judged"}},
		{"the shard size and the cache", func(s *v1alpha1.EvaluationSpec) {
			s.ShardSize = ptr.To[int32](7)
			s.Cache = &v1alpha1.Cache{Enabled: true}
		}, false, nil},
		{"the prompt", func(s *v1alpha1.EvaluationSpec) { s.Prompt.Template = "Q: {{ .Input }}" }, true, nil},
		{"the model's parameters", func(s *v1alpha1.EvaluationSpec) {
			s.Models[0].Parameters = &v1alpha1.Parameters{Temperature: ptr.To(v1alpha1.Number("0.7"))}
		}, true, nil},
		{"the data", func(s *v1alpha1.EvaluationSpec) { s.Datasets[0].Source.Inline = inline(4) }, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			was, now := base(), base()
			tc.edit(now)
			if changed := AnswersHash(was, "small") != AnswersHash(now, "small"); changed != tc.answersChanged {
				t.Errorf("answers hash changed = %v, want %v", changed, tc.answersChanged)
			}
			before, after := ScorerHashes(was), ScorerHashes(now)
			var changed []string
			for _, m := range []string{"exact_match", "judged"} {
				if before[m] != after[m] {
					changed = append(changed, m)
				}
			}
			if diff := cmp.Diff(tc.scorersChanged, changed); diff != "" {
				t.Errorf("scorers changed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWorkers(t *testing.T) {
	cases := []struct {
		parallelism int32
		shards      int
		want        int
	}{
		{4, 20, 4},
		{4, 3, 3}, // never more workers than shards
		{1, 256, 1},
		{8, 0, 1},
	}
	for _, tc := range cases {
		if got := Workers(tc.parallelism, tc.shards); got != tc.want {
			t.Errorf("Workers(%d, %d) = %d, want %d", tc.parallelism, tc.shards, got, tc.want)
		}
	}
}

// TestWorkerShards: every shard has exactly one worker, the workers' shards
// differ in number by one at most, and WorkerOf says whose a shard is.
func TestWorkerShards(t *testing.T) {
	spec := &v1alpha1.EvaluationSpec{Datasets: []v1alpha1.Dataset{{Name: "a"}, {Name: "b"}}}
	plan := Plan{ShardSize: 3, Totals: map[string]int{"a": 10, "b": 8}} // 4 + 3 shards
	shards := plan.Shards(spec, "m")
	for workers := 1; workers <= len(shards); workers++ {
		seen := map[int]int{}
		least, most := len(shards), 0
		for w := range workers {
			mine, err := WorkerShards(shards, w, workers)
			if err != nil {
				t.Fatalf("WorkerShards(%d of %d): %v", w, workers, err)
			}
			least, most = min(least, len(mine)), max(most, len(mine))
			for i, s := range mine {
				seen[s.Index]++
				if i > 0 && s.Index <= mine[i-1].Index {
					t.Errorf("%d workers: worker %d's shards are out of order: %v", workers, w, mine)
				}
				if got := WorkerOf(s.Index, workers); got != w {
					t.Errorf("WorkerOf(%d, %d) = %d, want %d", s.Index, workers, got, w)
				}
			}
		}
		for _, s := range shards {
			if seen[s.Index] != 1 {
				t.Errorf("%d workers: shard %d has %d workers, want 1", workers, s.Index, seen[s.Index])
			}
		}
		if most-least > 1 {
			t.Errorf("%d workers: from %d to %d shards a worker", workers, least, most)
		}
	}
	want, _ := WorkerShards(shards, 1, 3)
	if diff := cmp.Diff([]Shard{shards[1], shards[4]}, want); diff != "" {
		t.Errorf("worker 1 of 3 (-want +got):\n%s", diff)
	}
	for _, bad := range [][2]int{{3, 3}, {-1, 3}, {0, 0}, {0, 8}} {
		if _, err := WorkerShards(shards, bad[0], bad[1]); err == nil {
			t.Errorf("WorkerShards(%d of %d) of 7 shards: no error", bad[0], bad[1])
		}
	}
	if got := WorkerOf(5, 0); got != 5 {
		t.Errorf("WorkerOf(5, 0) = %d, want 5 (a worker per shard)", got)
	}
}

func TestShardOf(t *testing.T) {
	shards := []Shard{{Index: 0, Start: 0, End: 2}, {Index: 2, Start: 4, End: 6}}
	for i, want := range []int{0, 0, -1, -1, 2, 2, -1} {
		if got := ShardOf(shards, i); got != want {
			t.Errorf("ShardOf(sample %d) = %d, want %d", i, got, want)
		}
	}
}
