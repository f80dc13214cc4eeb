package view

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/results"
)

func TestMaskMessage(t *testing.T) {
	for _, c := range []struct{ msg, want string }{
		{"429 Too Many Requests: retry after 1234ms (request req_8f2a9)", "429 Too Many Requests: retry after # (request #)"},
		{"500 Internal Server Error at 2026-11-28T01:02:03Z", "500 Internal Server Error at #"},
		{"context deadline exceeded after 3.2s", "context deadline exceeded after #"},
		{"judge reply unreadable: line 3", "judge reply unreadable: line #"},
		{"999 is no status; 1000 neither; 404 is", "# is no status; # neither; 404 is"},
		{"café n°12 — ok", "café n°# — ok"},
		{"dial tcp 10.0.0.7:8080: connection refused", "dial tcp #: connection refused"},
		{"", ""},
	} {
		if got := maskMessage(c.msg); got != c.want {
			t.Errorf("maskMessage(%q) = %q, want %q", c.msg, got, c.want)
		}
	}
}

// TestErrorGroups: errored samples grouped by message, the largest group
// first, and the samples of a group selected by its pattern.
func TestErrorGroups(t *testing.T) {
	rec := func(id, kind, msg string) *results.Record {
		return &results.Record{ID: id, Model: "m", Dataset: "d", Error: msg, ErrorKind: kind, Scores: map[string]float64{"exact_match": 0}}
	}
	recs := []*results.Record{
		rec("1", results.ErrorKindCall, "500 Internal Server Error at 2026-11-28T01:02:03Z"),
		rec("2", results.ErrorKindCall, "429 Too Many Requests: retry after 120ms (request req_1a2b)"),
		{ID: "3", Model: "m", Dataset: "d", Scores: map[string]float64{"exact_match": 1}},
		rec("4", results.ErrorKindCall, "429 Too Many Requests: retry after 2500ms (request req_9z8y)"),
		rec("5", results.ErrorKindScoring, "judge reply unreadable: line 3"),
		rec("6", results.ErrorKindScoring, "429 Too Many Requests: retry after 7ms (request req_0)"), // another kind: apart
	}
	srv := httptest.NewServer(NewServer([]*Run{loadRecords(t, "1", "run", recs)}, testr.New(t)))
	defer srv.Close()
	code, body := get(t, srv, "/api/runs/1/errors")
	var got struct {
		Errored int
		Groups  []ErrorGroup
	}
	if err := json.Unmarshal(body, &got); code != http.StatusOK || err != nil {
		t.Fatalf("%d %v %s", code, err, body)
	}
	throttled := "429 Too Many Requests: retry after # (request #)"
	want := []ErrorGroup{
		{Pattern: throttled, Kind: "call", Message: "429 Too Many Requests: retry after 120ms (request req_1a2b)", Count: 2, Example: SampleRef{"m", "d", "2"}},
		{Pattern: "500 Internal Server Error at #", Kind: "call", Message: "500 Internal Server Error at 2026-11-28T01:02:03Z", Count: 1, Example: SampleRef{"m", "d", "1"}},
		{Pattern: "judge reply unreadable: line #", Kind: "scoring", Message: "judge reply unreadable: line 3", Count: 1, Example: SampleRef{"m", "d", "5"}},
		{Pattern: throttled, Kind: "scoring", Message: "429 Too Many Requests: retry after 7ms (request req_0)", Count: 1, Example: SampleRef{"m", "d", "6"}},
	}
	if diff := cmp.Diff(want, got.Groups); diff != "" || got.Errored != 5 {
		t.Errorf("%d errored; groups (-want +got):\n%s", got.Errored, diff)
	}

	// A group's samples: of its kind too, when the query says so.
	q := "/api/runs/1/samples?error=" + url.QueryEscape(throttled)
	for path, ids := range map[string][]string{q: {"m/2", "m/4", "m/6"}, q + "&kind=call": {"m/2", "m/4"}} {
		code, body = get(t, srv, path)
		var page struct{ Rows []Row }
		if err := json.Unmarshal(body, &page); code != http.StatusOK || err != nil {
			t.Fatalf("%s: %d %v %s", path, code, err, body)
		}
		var gotIDs []string
		for _, r := range page.Rows {
			gotIDs = append(gotIDs, r.Model+"/"+r.ID)
		}
		if diff := cmp.Diff(ids, gotIDs); diff != "" {
			t.Errorf("%s (-want +got):\n%s", path, diff)
		}
	}
	// The groups of a selection: its errored samples only.
	code, body = get(t, srv, "/api/runs/1/errors?kind=scoring")
	if err := json.Unmarshal(body, &got); code != http.StatusOK || err != nil || got.Errored != 2 || len(got.Groups) != 2 {
		t.Errorf("the groups of the scoring errors: %d %s", code, body)
	}
}
