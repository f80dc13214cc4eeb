package controllers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

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
	getRule := func(names ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}, ResourceNames: names}
	}
	watchRule := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"watch"}, ResourceNames: []string{"arith-budget"}}
	writeRule := func(names ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "update"}, ResourceNames: names}
	}
	run := cluster.RunID(build(false))
	runCached := cluster.RunID(build(true))
	// d has 10 samples, qa 3 and qa2 0 at shard size 5: 3 shards per model.
	plan := &cluster.Plan{ShardSize: 5, Totals: map[string]int{"d": 10, "qa": 3, "qa2": 0}}

	cases := []struct {
		name         string
		cache        bool
		plan         *cluster.Plan
		cacheSources []string
		shardObjects []string
		want         []rbacv1.PolicyRule
	}{
		{
			name: "before the plan: the planner fills in the plan, no heads yet",
			want: []rbacv1.PolicyRule{
				evalRule,
				getRule("arith-"+run+"-cache", "arith-"+run+"-data-qa", "arith-"+run+"-data-qa2", "arith-budget"),
				watchRule,
				writeRule("arith-" + run + "-plan"),
			},
		},
		{
			name:         "with a plan: the shards' heads and chunk slots the controller made",
			plan:         plan,
			shardObjects: []string{"arith-" + run + "-small-0", "arith-" + run + "-small-0-0", "arith-" + run + "-big-2"},
			want: []rbacv1.PolicyRule{
				evalRule,
				getRule("arith-"+run+"-cache", "arith-"+run+"-data-qa", "arith-"+run+"-data-qa2", "arith-"+run+"-plan", "arith-budget"),
				watchRule,
				writeRule("arith-"+run+"-big-2", "arith-"+run+"-small-0", "arith-"+run+"-small-0-0"),
			},
		},
		{
			name:         "cache on (or a scoring edit): the sources list and the earlier run's records",
			cache:        true,
			plan:         plan,
			cacheSources: []string{"arith-old-small-0", "arith-old-small-0-0"},
			shardObjects: []string{"arith-" + runCached + "-small-0"},
			want: []rbacv1.PolicyRule{
				evalRule,
				getRule("arith-"+runCached+"-cache", "arith-"+runCached+"-data-qa", "arith-"+runCached+"-data-qa2", "arith-"+runCached+"-plan", "arith-budget", "arith-old-small-0", "arith-old-small-0-0"),
				watchRule,
				writeRule("arith-" + runCached + "-small-0"),
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := passFor(build(tc.cache))
			p.plan = tc.plan
			p.cacheSources = tc.cacheSources
			p.shardObjects = tc.shardObjects
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
					// No create: a runner could otherwise make objects of the names
					// another Evaluation's run will use.
					// Watch only the budgets, by name.
					if v == "list" || (v == "watch" && !slices.Equal(rule.ResourceNames, []string{"arith-budget"})) || v == "*" || v == "delete" || v == "create" || v == "patch" {
						t.Errorf("rule %v grants %q", rule, v)
					}
				}
				if len(rule.ResourceNames) == 0 {
					t.Errorf("rule %v is not restricted by name", rule)
				}
			}
		})
	}
}

// TestSteadyPassCreatesNothing: once a run's objects exist, a pass creates
// none of them again (each refused create was a round trip, and the
// ServiceAccount's was made on every pass).
func TestSteadyPassCreatesNothing(t *testing.T) {
	var mu sync.Mutex
	var created []string
	ev := withUID(testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 10).OpenAIModel("small", llmURL).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(5).Generation(1).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}, funcs: interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			mu.Lock()
			created = append(created, fmt.Sprintf("%T %s", obj, obj.GetName()))
			mu.Unlock()
			return c.Create(ctx, obj, opts...)
		},
	}})
	h.mustReconcile(ev)
	mu.Lock()
	if !slices.Contains(created, "*v1.ServiceAccount "+cluster.RunnerName("arith")) {
		t.Fatalf("the first pass created %v, no runner ServiceAccount", created)
	}
	created = nil
	mu.Unlock()
	h.clock.Step(time.Second)
	h.mustReconcile(ev)
	mu.Lock()
	defer mu.Unlock()
	if len(created) > 0 {
		t.Errorf("a steady pass created %v", created)
	}
}

// The API server binds only a Role it can look up (a binder without the
// bind verb must hold every permission of the Role it binds): a run's first
// pass makes the runner's Role before its RoleBinding, even with the three
// permission objects made at once, and makes the run's Jobs.
func TestFirstPassBindsTheRoleItMade(t *testing.T) {
	ev := withUID(simpleEval("arith").Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}, funcs: interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if rb, ok := obj.(*rbacv1.RoleBinding); ok {
				// As the API server's RBAC escalation check answers.
				if err := c.Get(ctx, client.ObjectKey{Namespace: rb.Namespace, Name: rb.RoleRef.Name}, &rbacv1.Role{}); err != nil {
					return err
				}
			}
			return c.Create(ctx, obj, opts...)
		},
	}})
	if _, err := h.reconcile(ev); err != nil {
		t.Fatalf("the first pass: %v", err)
	}
	if jobs := h.jobs(); len(jobs) != 1 {
		t.Errorf("the first pass made %d Jobs, want 1", len(jobs))
	}
}
