package view

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/results"
)

// testRecords are 2 models x 6 samples of dataset d: model a answers
// samples 0-3 right (scores 1), 4 wrong (0) and 5 fails its call; model b
// scores 0.5 on each and its sample 3 fails scoring. Latency is 100*(i+1)
// ms (b: +50), cost 0.01*i for a and unknown for b; outputs say "Answer
// I" in capitals.
func testRecords() []*results.Record {
	var out []*results.Record
	for _, m := range []string{"a", "b"} {
		for i := range 6 {
			rec := &results.Record{ID: fmt.Sprintf("d-%d", i), Model: m, Dataset: "d", Output: fmt.Sprintf("ANSWER %d", i),
				Expected: []byte(fmt.Sprintf(`"expected %d"`, i)), Attempts: 1, LatencyMillis: int64(100 * (i + 1)),
				Scores: map[string]float64{}}
			switch m {
			case "a":
				c := 0.01 * float64(i)
				rec.Cost = &c
				switch i {
				case 4:
					rec.Scores["exact_match"] = 0
				case 5:
					rec.Error, rec.ErrorKind, rec.Output = "500 from the server", results.ErrorKindCall, ""
					rec.Scores["exact_match"] = 0
				default:
					rec.Scores["exact_match"] = 1
				}
			case "b":
				rec.LatencyMillis += 50
				rec.Scores["exact_match"] = 0.5
				if i == 3 {
					rec.Error, rec.ErrorKind = "judge failed", results.ErrorKindScoring
					rec.Scores["judge"] = 0
				}
			}
			out = append(out, rec)
		}
	}
	return out
}

func loadTest(t *testing.T) *Run {
	t.Helper()
	recs := testRecords()
	// Read in an order other than the samples': b's first.
	return loadRecords(t, "1", "test", append(recs[6:], recs[:6]...))
}

// loadRecords loads a run of recs, read in their order.
func loadRecords(t *testing.T, id, source string, recs []*results.Record) *Run {
	t.Helper()
	r, err := Load(id, source, t.TempDir(), nil, func(fn func(*results.Record)) error {
		for _, rec := range recs {
			fn(rec)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// rowsOf names the selected rows as MODEL/ID.
func rowsOf(r *Run, rows []int32) []string {
	out := []string{}
	for _, i := range rows {
		out = append(out, r.Models[r.rows[i].model]+"/"+string(r.id(int(i))))
	}
	return out
}

func TestLoad(t *testing.T) {
	r := loadTest(t)
	if diff := cmp.Diff([]string{"exact_match", "judge"}, r.Metrics); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{"call": 1, "scoring": 1}, r.Errors); diff != "" {
		t.Errorf("errors by kind (-want +got):\n%s", diff)
	}
	if r.Samples != 12 {
		t.Errorf("%d samples, want 12", r.Samples)
	}
	// Each row's scores stayed with it through the sorts of rows and metrics.
	for i := range r.rows {
		rec, err := r.Record(i)
		if err != nil {
			t.Fatal(err)
		}
		for m, name := range r.Metrics {
			want, ok := rec.Scores[name]
			if got := r.score(i, m); ok != (got == got) || (ok && got != want) {
				t.Errorf("row %d (%s/%s) %s: %v, want %v (%v)", i, rec.Model, rec.ID, name, got, want, ok)
			}
		}
	}
}

func TestSelect(t *testing.T) {
	r := loadTest(t)
	cases := []struct {
		name  string
		query string
		want  []string
	}{
		{"all, in sample order, model by model", "", []string{"a/d-0", "a/d-1", "a/d-2", "a/d-3", "a/d-4", "a/d-5", "b/d-0", "b/d-1", "b/d-2", "b/d-3", "b/d-4", "b/d-5"}},
		{"a model", "model=b&dataset=d", []string{"b/d-0", "b/d-1", "b/d-2", "b/d-3", "b/d-4", "b/d-5"}},
		{"no such model", "model=c", []string{}},
		{"wrong: scored below 1, not errored", "status=wrong&model=a", []string{"a/d-4"}},
		{"correct", "status=correct", []string{"a/d-0", "a/d-1", "a/d-2", "a/d-3"}},
		{"errored", "status=errored", []string{"a/d-5", "b/d-3"}},
		{"errored of a kind", "status=errored&kind=scoring", []string{"b/d-3"}},
		{"a score range", "minScore=0.4&maxScore=0.6", []string{"b/d-0", "b/d-1", "b/d-2", "b/d-3", "b/d-4", "b/d-5"}},
		{"another metric's range", "metric=judge&maxScore=0", []string{"b/d-3"}},
		{"latency", "minLatency=300&maxLatency=400", []string{"a/d-2", "a/d-3", "b/d-2"}},
		{"cost (unknown costs are out)", "minCost=0.025", []string{"a/d-3", "a/d-4", "a/d-5"}},
		{"text in the output, any case", "q=answer 2", []string{"a/d-2", "b/d-2"}},
		{"text in the expected value", "q=EXPECTED 5", []string{"a/d-5", "b/d-5"}},
		{"text in the id", "q=d-1", []string{"a/d-1", "b/d-1"}},
		{"sorted by latency, descending", "sort=latency&order=desc&maxLatency=250", []string{"b/d-1", "a/d-1", "b/d-0", "a/d-0"}},
		{"sorted by cost: unknown last", "sort=cost&minLatency=560", []string{"a/d-5", "b/d-5"}},
		{"sorted by cost descending: unknown still last", "sort=cost&order=desc&minLatency=560", []string{"a/d-5", "b/d-5"}},
		{"sorted by a score, ties in sample order", "sort=score:exact_match&model=a", []string{"a/d-4", "a/d-5", "a/d-0", "a/d-1", "a/d-2", "a/d-3"}},
		{"sorted by a score few have: none last", "sort=score:judge&order=desc&maxLatency=200", []string{"a/d-0", "a/d-1", "b/d-0"}},
		{"sorted by error kind", "sort=error&status=errored&order=desc", []string{"b/d-3", "a/d-5"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			q, err := ParseQuery(v)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := r.Select(q)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, rowsOf(r, rows)); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
		})
	}
}

func TestQueryErrors(t *testing.T) {
	r := loadTest(t)
	cases := []struct{ query, want string }{
		{"status=broken", `status: "broken" is not correct, wrong or errored`},
		{"order=up", `order: "up" is not asc or desc`},
		{"minLatency=fast", `minLatency: "fast" is not a number`},
		{"maxCost=NaN", `maxCost: "NaN" is not a number`},
		{"metric=accuracy&minScore=1", `metric: the run has no metric "accuracy" (it has exact_match, judge)`},
		{"sort=color", `sort: "color" is not a column (id, model, dataset, latency, cost, inputTokens, outputTokens, attempts, error, or score:METRIC)`},
		{"sort=score:accuracy", `sort: the run has no metric "accuracy"`},
	}
	for _, tc := range cases {
		v, _ := url.ParseQuery(tc.query)
		q, err := ParseQuery(v)
		if err == nil {
			_, err = r.Select(q)
		}
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: error %v, want %q", tc.query, err, tc.want)
		}
	}
}
