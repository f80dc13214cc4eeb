package compile_test

import (
	"testing"

	"github.com/proctor-dev/proctor/internal/compile"
)

// TestCountDatasetsURLWithoutHTTPClient: the cluster's planner counts url
// datasets with an Env that sets no HTTPClient, as Build's callers may; it must
// download with the default client, not dereference nil.
func TestCountDatasetsURLWithoutHTTPClient(t *testing.T) {
	srv := newDataServer(t, map[string][]byte{"/q.jsonl": []byte(jsonlData)})
	for _, extra := range []string{"", "sha256: " + sha256Hex([]byte(jsonlData))} {
		env := newEnv(t, nil)
		env.HTTPClient = nil
		ev := decode(t, urlDataset(srv.URL+"/q.jsonl", extra)+localModel)
		totals, err := compile.CountDatasets(t.Context(), ev, env)
		if err != nil {
			t.Fatalf("CountDatasets (%q): %v", extra, err)
		}
		if totals["remote"] != 3 {
			t.Errorf("totals = %v, want remote: 3", totals)
		}
	}
}
