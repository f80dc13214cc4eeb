package testutil

import (
	"fmt"
	"strings"
	"testing"
)

// PostgresCrashOnce edits the CRM example (docs/examples/crm/evaluation.yaml)
// so that its PostgreSQL dies by SIGKILL secs seconds after its first start
// (its data, in PROCTOR_SERVICE_DIR, outlives it), for the tests of a service
// that crashes mid-run. PostgreSQL then runs as a child of the shell: in a
// container a process cannot kill its PID 1.
func PostgresCrashOnce(evaluation string, secs int) string {
	s := strings.Replace(evaluation, `      exec postgres -D "$data"`, `      postgres -D "$data"`, 1)
	return strings.Replace(s, "        -c fsync=off -c max_connections=200\n", fmt.Sprintf(`        -c fsync=off -c max_connections=200 &
      pg=$!
      trap 'kill -INT $pg' TERM
      [ -f "$data/../crashed" ] || { sleep %d; touch "$data/../crashed"; kill -9 $pg; } &
      wait $pg
`, secs), 1)
}

// CutSpan removes from s the text from the first from up to the first to
// after it (to stays), failing the test if either is missing.
func CutSpan(tb testing.TB, s, from, to string) string {
	tb.Helper()
	i := strings.Index(s, from)
	j := -1
	if i >= 0 {
		j = strings.Index(s[i:], to)
	}
	if i < 0 || j < 0 {
		tb.Fatalf("no %q followed by %q to cut", from, to)
	}
	return s[:i] + s[i+j:]
}

// CRMFirstAgentOnly is the CRM example with its first agent model only.
func CRMFirstAgentOnly(tb testing.TB, evaluation string) string {
	tb.Helper()
	return CutSpan(tb, evaluation, "  - name: gpt-4-1\n", "  scoring:")
}
