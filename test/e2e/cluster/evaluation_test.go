//go:build e2e

package cluster_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/runner/results"
)

// getEvaluation reads an Evaluation as kubectl shows it.
func getEvaluation(t *testing.T, ns, name string) *v1alpha1.Evaluation {
	t.Helper()
	var ev v1alpha1.Evaluation
	if err := json.Unmarshal([]byte(mustKubectl(t, "get", "evaluation", "-n", ns, name, "-o", "json")), &ev); err != nil {
		t.Fatal(err)
	}
	return &ev
}

var progressText = regexp.MustCompile(`^(\d+)/(\d+)$`)

// watchColumns polls `kubectl get evaluations` until every named Evaluation has
// finished, checking on the way what a user watching with -w would rely on:
// PHASE only moves forward, PROGRESS reads done/total and never goes back, and no
// SCORE is shown before any sample is done. (SCORE is the first model's: it may
// still be empty while other models' samples are done.) It returns the last row of each.
func watchColumns(t *testing.T, ns string, timeout time.Duration, names ...string) map[string][3]string {
	t.Helper()
	// Suspended: a run resumed just before the watch shows it until the
	// controller has seen the edit (longer when it is busy with other runs).
	rank := map[string]int{"<none>": 0, "Suspended": 0, "Pending": 1, "Running": 2, "Succeeded": 3, "Failed": 3}
	last := map[string][3]string{}
	seenRunning := map[string]bool{}
	deadline := time.Now().Add(timeout)
	for {
		rows, err := columns(ns)
		if err != nil {
			t.Fatal(err)
		}
		done := 0
		for _, n := range names {
			row, ok := rows[n]
			if !ok {
				continue
			}
			phase, progress := row[0], row[1]
			if r, ok := rank[phase]; !ok {
				t.Fatalf("%s: PHASE %q is not one of Suspended, Pending, Running, Succeeded, Failed", n, phase)
			} else if r < rank[last[n][0]] {
				t.Errorf("%s: PHASE went back from %s to %s", n, last[n][0], phase)
			}
			if progress != "<none>" {
				m := progressText.FindStringSubmatch(progress)
				if m == nil {
					t.Fatalf("%s: PROGRESS %q is not done/total", n, progress)
				}
				if prev := progressText.FindStringSubmatch(last[n][1]); prev != nil && atoi(m[1]) < atoi(prev[1]) {
					t.Errorf("%s: PROGRESS went back from %s to %s", n, last[n][1], progress)
				}
				if atoi(m[1]) == 0 && row[2] != "<none>" {
					t.Errorf("%s: PROGRESS %s yet a SCORE %s", n, progress, row[2])
				}
			}
			if phase == "Running" {
				seenRunning[n] = true
			}
			last[n] = row
			if phase == "Succeeded" || phase == "Failed" {
				done++
			}
		}
		if done == len(names) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Evaluations not finished after %s: %v\n%s", timeout, last, printed(t, ns))
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, n := range names {
		if !seenRunning[n] {
			t.Logf("%s: finished between two polls; its Running phase was not seen", n)
		}
	}
	return last
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// fetchRecords fetches an Evaluation's records as a user would, with
// `proctor results`, and returns them.
func fetchRecords(t testing.TB, ns, name string) ([]results.Record, []results.Summary) {
	t.Helper()
	dir := t.TempDir()
	if _, err := run(time.Minute, proctorBin, "results", name, "-n", ns, "-o", dir); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []results.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var r results.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("results.jsonl: %v: %s", err, sc.Text())
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var summary struct {
		Results []results.Summary `json:"results"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &summary); err != nil {
		t.Fatalf("summary.json: %v", err)
	}
	return recs, summary.Results
}

// exactlyOnce checks that every (model, dataset, id) appears once, and that the
// records cover want of them.
func exactlyOnce(t testing.TB, recs []results.Record, want int) {
	t.Helper()
	seen := map[string]int{}
	for _, r := range recs {
		seen[r.Model+"/"+r.Dataset+"/"+r.ID]++
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("sample %s has %d records, want exactly 1", k, n)
		}
	}
	if len(seen) != want {
		t.Errorf("%d distinct samples have records, want %d", len(seen), want)
	}
}

// reasons lists the reasons of the events about an object.
func reasons(t *testing.T, ns, kind, name string) []string {
	t.Helper()
	out := mustKubectl(t, "get", "events", "-n", ns, "--field-selector", fmt.Sprintf("involvedObject.kind=%s,involvedObject.name=%s", kind, name),
		"-o", "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}")
	return strings.Fields(out)
}
