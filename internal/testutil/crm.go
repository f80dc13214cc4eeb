package testutil

import (
	"strings"
	"testing"
)

// PostgresCrashOnce edits the CRM example (docs/examples/crm/evaluation.yaml)
// so that its PostgreSQL dies by SIGKILL once, while conversations are in
// flight: a second after the fourth slot's database exists (the hooks create
// them just before their samples run). Its data, in PROCTOR_SERVICE_DIR,
// outlives it. PostgreSQL then runs as a child of the shell: in a container a
// process cannot kill its PID 1.
func PostgresCrashOnce(evaluation string) string {
	s := strings.Replace(evaluation, `      exec postgres -D "$data"`, `      postgres -D "$data"`, 1)
	return strings.Replace(s, "        -c fsync=off -c max_connections=200\n", `        -c fsync=off -c max_connections=200 &
      pg=$!
      trap 'kill -INT $pg' TERM
      slots="SELECT count(*) FROM pg_database WHERE datname ~ '^crm_[0-9]+$'"
      [ -f "$data/../crashed" ] || {
        until [ "$(psql -h 127.0.0.1 -p 55432 -U crm -d postgres -Atc "$slots" 2>/dev/null || echo 0)" -ge 4 ]; do sleep 0.2; done
        sleep 1; touch "$data/../crashed"; kill -9 $pg
      } &
      wait $pg
`, 1)
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
