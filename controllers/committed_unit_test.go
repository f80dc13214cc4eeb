package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/runner/results"
)

// TestTidyCommitted: once status shows an ended run's records committed to
// the results store, its Jobs and shard heads are deleted, if each of its
// Jobs completed; a failed Job keeps its pods' logs, a stopped run may go
// on, and a run whose records are in ConfigMaps needs its heads.
func TestTidyCommitted(t *testing.T) {
	const location = "s3://runs/cluster/" + testNS + "/arith/20261127T000000Z-r"
	failed := batchv1.JobStatus{FailedIndexes: ptr.To("1"), Conditions: []batchv1.JobCondition{jobCondition(batchv1.JobFailureTarget), jobCondition(batchv1.JobFailed)}}
	cases := []struct {
		name     string
		phase    v1alpha1.Phase
		reason   string
		location string
		big      *batchv1.JobStatus // the second model's Job; nil: complete
		suspend  bool
		keepFor  string // spec.runner.keepFor; the manager's is 0
		tidied   bool
	}{
		{name: "committed", phase: v1alpha1.PhaseSucceeded, location: location, tidied: true},
		{name: "committed, kept for a while", phase: v1alpha1.PhaseSucceeded, location: location, keepFor: "1h", tidied: true},
		{name: "committed, missed its gate", phase: v1alpha1.PhaseFailed, reason: v1alpha1.ReasonRegressionDetected, location: location, tidied: true},
		{name: "records in ConfigMaps", phase: v1alpha1.PhaseSucceeded},
		{name: "a shard failed", phase: v1alpha1.PhaseFailed, reason: v1alpha1.ReasonShardsFailed, location: location, big: &failed},
		{name: "stopped over its budget", phase: v1alpha1.PhaseFailed, reason: v1alpha1.ReasonBudgetExceeded, location: location, big: &batchv1.JobStatus{}, suspend: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, ev, run := finishedRun(t, "small", "big")
			storeModelRecords(t, h, run, "small")
			h.setJobStatus("arith-small-"+run, completeStatus("0-1"))
			big := completeStatus("0-1")
			if tc.big != nil {
				big = *tc.big
			}
			h.setJobStatus("arith-big-"+run, big)
			if tc.suspend {
				job := h.jobs()["arith-big-"+run]
				job.Spec.Suspend = ptr.To(true)
				if err := h.c.Update(h.ctx, job); err != nil {
					t.Fatal(err)
				}
			}
			// Someone else's Job wearing the run's labels is never touched.
			foreign := h.jobs()["arith-small-"+run].DeepCopy()
			foreign.ObjectMeta = metav1.ObjectMeta{Namespace: testNS, Name: "impostor", Labels: foreign.Labels}
			foreign.Spec.Selector, foreign.Spec.Template.Labels = nil, nil
			h.create(foreign)
			h.setJobStatus("impostor", failed)

			if tc.keepFor != "" {
				d, err := time.ParseDuration(tc.keepFor)
				if err != nil {
					t.Fatal(err)
				}
				h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) {
					s.Runner = &v1alpha1.Runner{KeepFor: &v1alpha1.Retention{Duration: d}}
				})
			}
			cur := h.eval("arith")
			ended := metav1.NewTime(h.clock.Now())
			cur.Status.CompletionTime = &ended
			cur.Status.Phase, cur.Status.Reason, cur.Status.ResultsLocation = tc.phase, tc.reason, tc.location
			cur.Status.Gated = cluster.GateHash(&cur.Spec)
			cur.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionFailed, Status: metav1.ConditionTrue, Reason: tc.reason, Message: "m", LastTransitionTime: metav1.NewTime(t0)}}
			if err := h.c.Status().Update(h.ctx, cur); err != nil {
				t.Fatal(err)
			}
			before := h.configMaps()
			h.clock.Step(time.Minute)
			if tc.keepFor != "" {
				// Kept until keepFor has passed since the run ended: asked
				// again then.
				jobs := len(h.jobs())
				if res := h.mustReconcile(ev); res.RequeueAfter != time.Hour-time.Minute {
					t.Errorf("requeued after %v, want %v", res.RequeueAfter, time.Hour-time.Minute)
				}
				if got := len(h.jobs()); got != jobs {
					t.Errorf("%d Jobs, want the %d kept", got, jobs)
				}
				h.clock.Step(time.Hour - time.Minute)
			}
			h.mustReconcile(ev)

			var jobs, heads []string
			for name := range h.jobs() {
				jobs = append(jobs, name)
			}
			for name, cm := range h.configMaps() {
				if c := cm.Labels[cluster.LabelComponent]; c == cluster.ComponentShard || c == cluster.ComponentRecords {
					heads = append(heads, name)
				}
			}
			wantJobs := []string{"arith-big-" + run, "arith-small-" + run, "impostor"}
			wantHeads := 7 // the heads of both models, and storeModelRecords' three chunks
			if tc.tidied {
				wantJobs, wantHeads = []string{"impostor"}, 0
			}
			if diff := cmp.Diff(wantJobs, slices.Sorted(slices.Values(jobs))); diff != "" {
				t.Errorf("Jobs left (-want +got):\n%s", diff)
			}
			if len(heads) != wantHeads {
				t.Errorf("%d heads and chunks left (%v), want %d", len(heads), heads, wantHeads)
			}
			for name, cm := range before {
				if c := cm.Labels[cluster.LabelComponent]; c != cluster.ComponentShard && c != cluster.ComponentRecords && !h.exists(cm, name) {
					t.Errorf("ConfigMap %s (%s) was deleted", name, c)
				}
			}
			if got := h.eval("arith").Status; got.Phase != tc.phase || got.ResultsLocation != tc.location {
				t.Errorf("status phase %q location %q: the ended run changed", got.Phase, got.ResultsLocation)
			}
			if e := h.rec.take(); tc.tidied && len(e) != 0 {
				t.Errorf("events %v", reasons(e))
			}
		})
	}
}

// TestShardParts: a shard's part of any generation is found by its key, and
// no other shard's.
func TestShardParts(t *testing.T) {
	sh := cluster.Shard{Model: "m", Dataset: "d", Index: 10000}
	cases := []struct {
		key  string
		want bool
	}{
		{"parts/m/d/shard-10000.parquet", true},
		{"parts/m/d/shard-10000-g2.parquet", true},
		{"parts/m/d/shard-100000.parquet", false},
		{"parts/m/d/shard-100000-g2.parquet", false},
		{"parts/m/e/shard-10000.parquet", false},
		{"parts/n/d/shard-10000-g3.parquet", false},
	}
	for _, tc := range cases {
		if got := isShardPart(tc.key, sh); got != tc.want {
			t.Errorf("isShardPart(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
	if got := shardPartName(sh, 3); got != "shard-10000-g3" {
		t.Errorf("shardPartName(gen 3) = %q", got)
	}
}

// TestStagedRecordsReadWhatTheHeadSealed: a shard's staging chunks are read
// by their keys, as many as its head says it sealed, whatever a listing
// would show; one the head counts but the store lacks stops the gathering
// with a store error (the run waits), instead of records silently missing.
func TestStagedRecordsReadWhatTheHeadSealed(t *testing.T) {
	head := cluster.HeadName("arith", "r1", "small", 0)
	chunk := func(recs map[int]results.Record, order ...int) []byte { return gzipJournal(t, recs, order) }
	objects := map[string][]byte{
		cluster.StagingKey(head, 0): chunk(recsOf("small", "d", 0, 1), 0, 1),
		cluster.StagingKey(head, 1): chunk(recsOf("small", "d", 2), 2),
	}
	var gets atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Query().Has("list-type") {
			t.Errorf("%s %s: only GETs of keys are expected", r.Method, r.URL)
		}
		gets.Add(1)
		b, ok := objects[strings.TrimPrefix(r.URL.Path, "/runs/loc/")]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>`)
			return
		}
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	loc, _ := objstore.ParseURL("s3://runs/loc")
	store, err := objstore.Open(context.Background(), loc, objstore.Options{Endpoint: srv.URL, AccessKeyID: "id", SecretAccessKey: "key"})
	if err != nil {
		t.Fatal(err)
	}
	read := stagedRecords(store)

	lines, err := read(context.Background(), shardOf("small", 0), head, 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, l := range lines {
		got = append(got, l.Index)
	}
	if diff := cmp.Diff([]int{0, 1, 2}, got); diff != "" || gets.Load() != 2 {
		t.Errorf("records of 2 sealed chunks (-want +got):\n%s; %d GETs", diff, gets.Load())
	}

	_, err = read(context.Background(), shardOf("small", 0), head, 3)
	var se *storeError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), cluster.StagingKey(head, 2)+" is missing: shard "+head+" sealed 3 chunks") {
		t.Errorf("a chunk the head counts and the store lacks: %v, want a store error naming it", err)
	}
}
