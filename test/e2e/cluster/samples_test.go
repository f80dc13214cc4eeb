//go:build e2e

package cluster_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// sampleOutcome is what each sample in config/samples ends with against the fake
// model server: the PROGRESS and SCORE columns, and the number of records.
// The fake server's answers are deterministic (test/fakellm/reply.go), and so
// are these; the comments say why each score is what it is.
var sampleOutcome = map[string]struct {
	progress, score string
	records         int
}{
	// Every agent reads its own context.md: 4 of 4.
	"agent-capitals": {"4/4", "1.0000", 4},
	// tool_selection: all four pick the expected tool.
	"anthropic-tools": {"4/4", "1.0000", 4},
	// 3 models x 3 conversations; the fake server picks each tool by its words.
	"crm-baselines": {"9/9", "1.0000", 9},
	// tool_selection over 4 samples in 2 datasets: all right.
	"claude-tools": {"4/4", "1.0000", 4},
	// 5 of 6 questions (limit 5); the judge accepts the 4 found in context.md, and
	// q5's answer is not in its context.
	"docqa-agent-judge": {"5/5", "0.8000", 5},
	// exact_match: the fake server computes arithmetic exactly.
	"openai-arithmetic": {"8/8", "1.0000", 8},
	// 24 samples in 2 shards sharing 300 RPM.
	"sliding-window": {"24/24", "1.0000", 24},
	// 10 of 12 (limit 10) x 2 models; b05's REPLY (Sydney) is wrong on purpose.
	"browse-qa": {"20/20", "0.9000", 20},
	// Two Evaluations sharing one ModelEndpoint: arithmetic, all right.
	"nightly-suite": {"6/6", "1.0000", 6},
	"experiment":    {"4/4", "1.0000", 4},
	// Its agent asks twice through the same endpoint; the fake server computes.
	"coding-agent": {"3/3", "1.0000", 3},
	// 3 agents x 12 conversations, each in its slot's database: every one
	// sees exactly its own contacts.
	"crm-agents": {"36/36", "1.0000", 36},
}

// TestSamples applies every file in config/samples, as the README tells users,
// and follows them with kubectl to the end.
func TestSamples(t *testing.T) {
	ns := namespace(t, "e2e-samples")
	files, err := filepath.Glob(filepath.Join(repo, "config", "samples", "proctor_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples: %v", err)
	}
	var names []string
	applied := time.Now()
	for _, f := range files {
		out := mustKubectl(t, "apply", "-n", ns, "-f", f)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			// "evaluation.proctor.dev/NAME created"
			if rest, ok := strings.CutPrefix(line, "evaluation.proctor.dev/"); ok {
				names = append(names, strings.Fields(rest)[0])
			}
		}
	}
	if len(names) != len(sampleOutcome) {
		t.Fatalf("applied Evaluations %v; the test knows the outcome of %v: add the new sample's to sampleOutcome", names, slices.Sorted(maps.Keys(sampleOutcome)))
	}

	// The first runner pod: how long a user waits after kubectl apply.
	eventually(t, 2*time.Minute, 100*time.Millisecond, "a runner pod running", func() error {
		out, err := kubectl("get", "pods", "-n", ns, "-l", "proctor.dev/component=runner",
			"-o", "jsonpath={range .items[*]}{.status.phase}{\"\\n\"}{end}")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "Running") && !strings.Contains(out, "Succeeded") {
			return errNotYet
		}
		return nil
	})
	record("kubectl apply -> first runner pod Running", time.Since(applied))

	header := strings.Fields(strings.SplitN(printed(t, ns), "\n", 2)[0])
	if got, want := strings.Join(header, " "), "NAME PHASE PROGRESS SCORE COST BATCHES REASON AGE"; got != want {
		t.Errorf("kubectl get evaluations columns = %q, want %q", got, want)
	}

	final := watchColumns(t, ns, 8*time.Minute, names...)
	record("kubectl apply -> all samples Succeeded", time.Since(applied))

	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			want := sampleOutcome[name]
			if got := final[name]; got != [3]string{"Succeeded", want.progress, want.score} {
				ev := getEvaluation(t, ns, name)
				t.Errorf("PHASE PROGRESS SCORE = %v, want [Succeeded %s %s]; message %q", got, want.progress, want.score, ev.Status.Message)
			}
			ev := getEvaluation(t, ns, name)
			if ev.Status.ObservedGeneration != ev.Generation {
				t.Errorf("status.observedGeneration = %d, want %d", ev.Status.ObservedGeneration, ev.Generation)
			}
			complete := false
			for _, c := range ev.Status.Conditions {
				if c.Type == "Complete" && c.Status == "True" {
					complete = true
				}
				if c.ObservedGeneration != ev.Generation {
					t.Errorf("condition %s has observedGeneration %d, want %d", c.Type, c.ObservedGeneration, ev.Generation)
				}
			}
			if !complete {
				t.Errorf("no Complete=True condition: %+v", ev.Status.Conditions)
			}
			if ev.Status.StartTime == nil || ev.Status.CompletionTime == nil {
				t.Errorf("startTime %v, completionTime %v: want both", ev.Status.StartTime, ev.Status.CompletionTime)
			}
			if ev.Status.ResultsConfigMap != name+"-results" {
				t.Errorf("status.resultsConfigMap = %q, want %s-results", ev.Status.ResultsConfigMap, name)
			}
			if len(ev.Status.Results) == 0 {
				t.Error("status.results is empty")
			}
			if r := reasons(t, ns, "Evaluation", name); !slices.Contains(r, "Started") || !slices.Contains(r, "Completed") {
				t.Errorf("events %v: want Started and Completed", r)
			}
			recs, summaries := fetchRecords(t, ns, name)
			exactlyOnce(t, recs, want.records)
			if len(summaries) != len(ev.Status.Results) {
				t.Errorf("summary.json has %d results, status %d", len(summaries), len(ev.Status.Results))
			}
		})
	}
}

// TestSamplesReadme checks the samples still say how to run them here: their
// comments must not point at images or names the local cluster lacks.
func TestSamplesReadme(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(repo, "config", "samples", "*.yaml"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "image: busybox:") && !strings.Contains(string(b), "image: busybox:1.35.0") {
			t.Errorf("%s: its busybox image is not the one hack/build-images.sh builds (busybox:1.35.0)", f)
		}
	}
}
