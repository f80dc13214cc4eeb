package controllers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
)

func TestRunnerRules(t *testing.T) {
	build := func(cache bool) *v1alpha1.Evaluation {
		ev := testutil.MakeEvaluation("arith", testNS).
			InlineDataset("d", 10).
			ConfigMapDataset("qa", "qa-data", "data.jsonl").
			ConfigMapDataset("qa2", "qa-data", "more.jsonl"). // the same ConfigMap twice
			OpenAIModel("small", "http://llm.local/v1").
			OpenAIModel("big", "http://llm.local/v1").
			OpenAIModel("judge", "http://llm.local/v1").
			Scorer(v1alpha1.ScorerExactMatch).
			Obj()
		ev.Spec.Scoring = append(ev.Spec.Scoring, v1alpha1.Scorer{Type: v1alpha1.ScorerJudge, Judge: &v1alpha1.Judge{Model: "judge"}})
		ev.Spec.Cache.Enabled = cache
		return ev
	}
	evalRule := rbacv1.PolicyRule{APIGroups: []string{"proctor.dev"}, Resources: []string{"evaluations"}, Verbs: []string{"get"}, ResourceNames: []string{"arith"}}
	createRule := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}}
	getRule := func(names ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}, ResourceNames: names}
	}
	headRule := func(names ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "update"}, ResourceNames: names}
	}
	run := cluster.RunID(&build(false).Spec)
	runCached := cluster.RunID(&build(true).Spec)
	// d has 10 samples, qa 3 and qa2 0 at shard size 5: 3 shards per model.
	plan := &cluster.Plan{ShardSize: 5, Totals: map[string]int{"d": 10, "qa": 3, "qa2": 0}}

	cases := []struct {
		name         string
		cache        bool
		plan         *cluster.Plan
		cacheSources []string
		want         []rbacv1.PolicyRule
	}{
		{
			name: "before the plan: no heads yet",
			want: []rbacv1.PolicyRule{
				evalRule,
				getRule("arith-"+run+"-data-qa", "arith-"+run+"-data-qa2", "arith-"+run+"-plan", "arith-budget"),
				createRule,
			},
		},
		{
			name: "with a plan: each subject's shard heads, not the judge's",
			plan: plan,
			want: []rbacv1.PolicyRule{
				evalRule,
				getRule("arith-"+run+"-data-qa", "arith-"+run+"-data-qa2", "arith-"+run+"-plan", "arith-budget"),
				createRule,
				headRule(
					"arith-"+run+"-small-0", "arith-"+run+"-small-1", "arith-"+run+"-small-2",
					"arith-"+run+"-big-0", "arith-"+run+"-big-1", "arith-"+run+"-big-2",
				),
			},
		},
		{
			name:         "cache on: the sources list and the earlier run's records",
			cache:        true,
			plan:         plan,
			cacheSources: []string{"arith-old-small-0", "arith-old-small-0-abc123-0"},
			want: []rbacv1.PolicyRule{
				evalRule,
				getRule("arith-"+runCached+"-cache", "arith-"+runCached+"-data-qa", "arith-"+runCached+"-data-qa2", "arith-"+runCached+"-plan", "arith-budget", "arith-old-small-0", "arith-old-small-0-abc123-0"),
				createRule,
				headRule(
					"arith-"+runCached+"-small-0", "arith-"+runCached+"-small-1", "arith-"+runCached+"-small-2",
					"arith-"+runCached+"-big-0", "arith-"+runCached+"-big-1", "arith-"+runCached+"-big-2",
				),
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := passFor(build(tc.cache))
			p.plan = tc.plan
			p.cacheSources = tc.cacheSources
			got := unitReconciler().runnerRules(p)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("runnerRules mismatch (-want +got):\n%s", diff)
			}
			for _, rule := range got {
				for _, res := range rule.Resources {
					if res == "secrets" {
						t.Errorf("rule %v grants secrets", rule)
					}
				}
				for _, v := range rule.Verbs {
					if v == "list" || v == "watch" || v == "*" || v == "delete" {
						t.Errorf("rule %v grants %q", rule, v)
					}
				}
				if len(rule.ResourceNames) == 0 && !cmp.Equal(rule, createRule) {
					t.Errorf("rule %v is not restricted by name", rule)
				}
			}
		})
	}
}
