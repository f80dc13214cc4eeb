package local_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/internal/testutil"
)

// TestServiceThatNeverBecomesReady fails the run within its probe's budget,
// naming the service, and leaves nothing of it running.
func TestServiceThatNeverBecomesReady(t *testing.T) {
	w := newWorkspace(t)
	w.writeEval("stuck", `  datasets:
  - name: d
    source: {inline: [{id: a, input: x, expected: x}]}
  services:
  - name: mock-api
    image: mock:1
    command: [sh, -c, "echo listening soon; exec sleep 617"]
    ports: [{name: http, containerPort: 1}]
    readinessProbe: {tcpSocket: {port: http}, periodSeconds: 1, failureThreshold: 2}
  models:
  - name: echo
    provider: agent
    agent: {command: [echo, x]}
`)
	r := w.run()
	if r.Code != 1 || !strings.Contains(r.Stderr, "service mock-api did not become ready within 2s (initialDelaySeconds 0 + periodSeconds 1 × failureThreshold 2): tcpSocket probe") ||
		!strings.Contains(r.Stderr, "listening soon") {
		t.Fatalf("want exit 1 naming the service, its budget and its log:\n%s", r)
	}
	if r.Elapsed > 15*time.Second {
		t.Errorf("took %s to give up on a 2s budget", r.Elapsed)
	}
	if out, _ := exec.Command("pgrep", "-f", "sleep 617").Output(); len(out) > 0 {
		t.Errorf("the service is still running: pid %s", out)
	}
}

// TestHookThatHangsIsKilled: a beforeSample that hangs is killed at its
// timeout, whatever it started; its sample is an error naming the hook, and
// the others run.
func TestHookThatHangsIsKilled(t *testing.T) {
	w := newWorkspace(t)
	w.writeEval("hang", `  datasets:
  - name: d
    source: {inline: [{id: a, input: x, expected: x}, {id: b, input: x, expected: x}, {id: c, input: x, expected: x}]}
  concurrency: 1
  hooks:
    beforeSample:
      command: [sh, -c, 'if [ "$PROCTOR_SAMPLE_ID" = b ] && [ ! -f "$DONE" ]; then touch "$DONE"; sleep 619 & wait; fi']
      timeout: 2s
    env: [{name: DONE}]
  models:
  - name: echo
    provider: agent
    agent: {command: [echo, x]}
  scoring: [{type: exact_match}]
`)
	w.env["DONE"] = w.tmp + "/hung-once"
	r := w.run()
	recs, _ := readRecords(t, w.out)
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3\n%s", len(recs), r)
	}
	for _, rec := range recs {
		switch {
		case rec.ID == "b" && (rec.ErrorKind != "hook" || rec.Error != "hook beforeSample (slot 0) timed out after 2s and was killed"):
			t.Errorf("b: kind %q error %q", rec.ErrorKind, rec.Error)
		case rec.ID != "b" && rec.Error != "":
			t.Errorf("%s: %s", rec.ID, rec.Error)
		}
	}
	if out, _ := exec.Command("pgrep", "-f", "sleep 619").Output(); len(out) > 0 {
		t.Errorf("what the hook started is still running: pid %s", out)
	}
}

// TestServiceCrashMidRun: PostgreSQL dies under the CRM example's agents
// (kill -9, once). The conversations in flight fail naming the service; the
// run goes on once it is back (started again, its data recovered), and every
// other conversation sees exactly its own contacts.
func TestServiceCrashMidRun(t *testing.T) {
	const n = 24
	w := crmWorkspace(t, n, func(s string) string {
		// One agent model; PostgreSQL killed once 4 slots' conversations are under way.
		s = testutil.CRMFirstAgentOnly(t, s)
		return testutil.PostgresCrashOnce(s)
	})
	r := w.run()
	if r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	recs, _ := readRecords(t, w.out)
	if len(recs) != n {
		t.Fatalf("%d records, want %d\n%s", len(recs), n, r)
	}
	failed, example := 0, ""
	for _, rec := range recs {
		switch {
		case rec.Error == "" && rec.Scores["exact_match"] == 1:
		case rec.ErrorKind == "service" && strings.HasPrefix(rec.Error, "service crm-db "):
			failed++
			example = rec.Error
		default:
			t.Errorf("%s: saw %q, error %q (kind %q)", rec.ID, rec.Output, rec.Error, rec.ErrorKind)
		}
	}
	t.Logf("%d conversations failed naming the service, such as: %s", failed, example)
	if failed == 0 || failed > 8 {
		t.Errorf("%d conversations failed naming the service; want those in flight (1 to 8)\n%s", failed, r)
	}
	if !strings.Contains(r.Stderr, "Restarted a service") {
		t.Errorf("no word of the restart:\n%s", r.Stderr)
	}
}
