package local_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestSpendExample runs docs/examples/spend.yaml as docs/tasks/spend.md says: the
// estimate, then the run (one model called, the same one in batches), against
// the fake server at the example's address.
func TestSpendExample(t *testing.T) {
	t.Parallel()
	srv := newFake(t, fakellm.Config{BatchDelay: time.Second})
	example, err := os.ReadFile("../../../docs/examples/spend.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../../../docs/examples/arithmetic.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	w := newWorkspace(t)
	w.write("arithmetic.jsonl", string(data))
	w.write("evaluation.yaml", strings.ReplaceAll(string(example), "http://127.0.0.1:8080", srv.URL))

	est := w.run("--estimate")
	if est.Code != 0 || !strings.Contains(est.Stdout, "nightly") || !strings.Contains(est.Stderr, "covers the run at its bound") {
		t.Fatalf("--estimate:\n%s", est)
	}
	r := w.run()
	if r.Code != 0 {
		t.Fatalf("the run:\n%s", r)
	}
	sum := readSummary(t, w.out)
	if len(sum.Results) != 2 || *sum.Results[1].Cost["model"]*2 != *sum.Results[0].Cost["model"] || sum.Results[0].Metrics["exact_match"] != 1 {
		t.Errorf("summary %+v: want the batch model at half the cost of the other, every answer right", sum.Results)
	}
	if st := srv.Stats(); st.Batches == 0 || st.DuplicateBatchRequests != 0 {
		t.Errorf("server stats %+v", st)
	}
	if _, err := os.Stat(filepath.Join(w.out, "checkpoint", "batches.jsonl")); err != nil {
		t.Errorf("no batch record: %v", err)
	}
}
