package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/spend"
)

// rescorePair is a pair scored by exact_match and a judge.
func rescorePair(fp string, scorers map[string]string) Pair {
	return Pair{Model: "m", Dataset: "d", Fingerprint: fp, Total: 4, Metrics: []string{"exact_match", "judge"},
		Parts: &Parts{Model: "model", Data: "data", System: "sys", Template: "tpl", Scorers: scorers}}
}

func dollars(v float64) *float64 { return &v }

// TestScoringChangeKeepsAnswers: a journal whose scoring alone changed keeps
// its answers, marked to be scored again, with the scores of unchanged
// scorers; what it held stays counted as spent once; a re-scored record
// replaces its answer's at assembly, and an answer not yet re-scored is not
// counted as finished.
func TestScoringChangeKeepsAnswers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	before := rescorePair("fp1", map[string]string{"exact_match": "em1", "judge": "j1"})
	j, err := OpenJournal(path, before, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	paid := func(id string, scores map[string]float64) *Record {
		return &Record{ID: id, Model: "m", Dataset: "d", Output: "answer " + id, Scores: scores, Attempts: 1,
			InputTokens: 10, OutputTokens: 5, Cost: dollars(0.01), JudgeInputTokens: 20, JudgeCost: dollars(0.002)}
	}
	mustAppend(t, j, 0, paid("a", map[string]float64{"exact_match": 1, "judge": 1}))
	mustAppend(t, j, 1, paid("b", map[string]float64{"exact_match": 0, "judge": 0}))
	failed := paid("c", map[string]float64{"exact_match": 1, "judge": 0})
	failed.Error, failed.ErrorKind, failed.ScoreErrors = "scorer judge: no verdict", ErrorKindScoring, map[string]string{"judge": "no verdict"}
	mustAppend(t, j, 2, failed)
	mustAppend(t, j, 3, &Record{ID: "d", Model: "m", Dataset: "d", Scores: map[string]float64{"exact_match": 0, "judge": 0},
		Error: "HTTP 400", ErrorKind: ErrorKindCall, Attempts: 1, Cost: dollars(0)})
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	// exact_match changed (normalize: lowercase, say); the judge did not.
	after := rescorePair("fp2", map[string]string{"exact_match": "em2", "judge": "j1"})
	j, err = OpenJournal(path, after, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&Rescoring{Model: "m", Dataset: "d", Changed: []string{"scorer exact_match changed"}, Answers: 3}, j.Rescoring()); diff != "" {
		t.Errorf("rescoring (-want +got):\n%s", diff)
	}
	// Three answers cost 3 × (0.01 + 0.002); the failed call nothing.
	if got, want := j.Spent(), (spend.Totals{Tokens: 3 * 35, Cost: 3 * spend.FromDollars(0.012)}); got != want {
		t.Errorf("spent %+v, want %+v", got, want)
	}
	for i, want := range []bool{false, false, false, true} {
		if j.Done(i) != want {
			t.Errorf("Done(%d) = %v, want %v", i, j.Done(i), want)
		}
	}
	a := j.Answered(0)
	if a == nil || a.Output != "answer a" || !cmp.Equal(a.Scores, map[string]float64{"judge": 1}) {
		t.Fatalf("Answered(0) = %+v, want the answer with the judge's score alone", a)
	}
	if c := j.Answered(2); c == nil || len(c.Scores) != 0 || c.Error != "" || c.ScoreErrors != nil {
		t.Errorf("Answered(2) = %+v, want the answer without scores (the judge failed, exact_match changed)", c)
	}
	if j.Answered(0) != nil || j.Answered(3) != nil {
		t.Error("Answered gave an answer twice, or one of a failed call")
	}
	// Sample 0 scored again: it carries its answer's costs and adds the new judging (none).
	rescored := paid("a", map[string]float64{"exact_match": 1, "judge": 1})
	rescored.Rescored = true
	mustAppend(t, j, 0, rescored)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	// Stopped there: reopened, the re-scoring resumes, and sample 0 is not paid twice.
	j, err = OpenJournal(path, after, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := j.Rescoring(); r == nil || r.Answers != 2 {
		t.Errorf("rescoring after a stop = %+v, want 2 answers left", r)
	}
	if got, want := j.Spent(), (spend.Totals{Tokens: 3 * 35, Cost: 3 * spend.FromDollars(0.012)}); got != want {
		t.Errorf("spent after re-scoring one %+v, want %+v (the answer counted once)", got, want)
	}
	j.Close()
	var out bytes.Buffer
	agg := NewAggregate("m", "d", 4, after.Metrics)
	if err := Assemble(path, &out, agg, 4); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	if diff := cmp.Diff([]string{"a", "d"}, ids); diff != "" {
		t.Errorf("assembled (-want +got):\n%s", diff)
	}
	if s := agg.Summary(); s.Completed != 2 {
		t.Errorf("completed %d, want 2: answers awaiting their scores are not finished", s.Completed)
	}
}

// TestChangedAnswersAreRefusedSayingWhat: a change to what decides the
// answers refuses the journal, naming each part that changed, and the
// directory's Check refuses before any journal is opened (or re-scored).
func TestChangedAnswersAreRefusedSayingWhat(t *testing.T) {
	root := t.TempDir()
	d, err := OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Unlock() }()
	before := rescorePair("fp1", map[string]string{"exact_match": "em1", "judge": "j1"})
	j, err := d.Open(before, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, j, 0, rec("a", 1, ""))
	d.Close()

	after := rescorePair("fp2", map[string]string{"exact_match": "em2", "judge": "j1"})
	after.Parts.Model, after.Parts.Template = "model2", "tpl2"
	err = d.Check([]Pair{after})
	var mismatch *MismatchError
	if !errors.As(err, &mismatch) || !errors.Is(err, ErrMismatch) {
		t.Fatalf("Check = %v, want a *MismatchError", err)
	}
	for _, want := range []string{`model "m" (its provider, endpoint, model or parameters)`, "the prompt template (spec.prompt.template)", "scorer exact_match changed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "system prompt") || strings.Contains(err.Error(), "dataset") && !strings.Contains(err.Error(), `dataset "d"`) {
		t.Errorf("error %q names what did not change", err)
	}
	if _, err := d.Open(after, OpenOptions{}); !errors.As(err, &mismatch) {
		t.Errorf("Open = %v, want a *MismatchError", err)
	}
}

// TestRescoreAllScoresEverything: proctor score --all scores every answer
// again, though nothing changed; without --all, only failed scorers.
func TestRescoreAllScoresEverything(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts OpenOptions
		want int
	}{
		{"nothing changed, nothing failed", OpenOptions{Rescore: true}, 0},
		{"all", OpenOptions{Rescore: true, RescoreAll: true}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "j.jsonl")
			p := rescorePair("fp1", map[string]string{"exact_match": "em1", "judge": "j1"})
			j, err := OpenJournal(path, p, OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			mustAppend(t, j, 0, &Record{ID: "a", Output: "x", Scores: map[string]float64{"exact_match": 1, "judge": 1}})
			mustAppend(t, j, 1, &Record{ID: "b", Output: "y", Scores: map[string]float64{"exact_match": 0, "judge": 1}})
			j.Close()
			j, err = OpenJournal(path, p, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			got := 0
			if r := j.Rescoring(); r != nil {
				got = r.Answers
			}
			if got != tc.want {
				t.Errorf("answers to score again = %d, want %d", got, tc.want)
			}
		})
	}
}
