package local_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
)

// TestEveryCallFailingExitsOneWithTheReason points a model at a server that is
// down: every sample fails, and proctor must say why (the most common error,
// with its count) and exit 1 rather than 0.
func TestEveryCallFailingExitsOneWithTheReason(t *testing.T) {
	t.Parallel()
	// A port that refuses connections: listen, note the address, close.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close()

	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", 4))
	w.writeEval("down", fmt.Sprintf(`  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - {name: gpt, provider: openai, model: fake-model, baseURL: "http://%s/v1"}
  scoring:
  - type: exact_match
  retry: {maxAttempts: 1}
`, down))
	res := w.run()
	if res.Code != 1 {
		t.Errorf("every sample failed: exit %d, want 1\n%s", res.Code, res)
	}
	out := res.Stdout + res.Stderr
	if !strings.Contains(out, "connection refused") {
		t.Errorf("the output does not give the reason (connection refused)\n%s", res)
	}
	if !strings.Contains(res.Stderr, "4× gpt/qs:") {
		t.Errorf("stderr does not count the error (4× gpt/qs: ...)\n%s", res)
	}
	if !strings.Contains(res.Stderr, "all 4 samples failed") {
		t.Errorf("stderr does not say that every sample failed\n%s", res)
	}
	recs, _ := readRecords(t, w.out)
	if len(recs) != 4 {
		t.Errorf("results.jsonl: %d records, want 4 (the errors are still results)", len(recs))
	}
}
