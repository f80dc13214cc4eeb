package testutil

import (
	"fmt"
	"strings"
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
