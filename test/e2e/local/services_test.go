package local_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The CRM example (docs/examples/crm): three agents × conversations, each
// in a PostgreSQL database of its slot's, served by a real PostgreSQL that
// the run starts as a service.
const crmExample = "../../../docs/examples/crm"

// postgresBin is the directory of PostgreSQL's server programs: $PG_BINDIR,
// or the newest of Debian's (hack/install-host-deps.sh postgres installs it).
func postgresBin(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("PG_BINDIR"); d != "" {
		return d
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.Sort(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "postgres")); err == nil {
			return dirs[i]
		}
	}
	t.Fatal("no PostgreSQL server: run hack/install-host-deps.sh postgres (or set PG_BINDIR)")
	return ""
}

// unprivileged makes proctor run as nobody when the test runs as root:
// PostgreSQL refuses to run as root.
func (w *workspace) unprivileged() {
	w.t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	w.cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	root := filepath.Dir(w.dir)
	for _, d := range []string{filepath.Dir(root), root, w.home, w.tmp} {
		if err := os.Chmod(d, 0o777); err != nil {
			w.t.Fatal(err)
		}
	}
}

// crmWorkspace holds the CRM example, edited by edit, limited to n
// conversations.
func crmWorkspace(t *testing.T, n int, edit func(string) string) *workspace {
	t.Helper()
	w := newWorkspace(t)
	w.unprivileged()
	w.timeout = 3 * time.Minute
	w.env["PATH"] = postgresBin(t) + ":" + os.Getenv("PATH")
	src, err := os.ReadFile(filepath.Join(crmExample, "evaluation.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	file := strings.Replace(string(src), "source: {file: conversations.jsonl}",
		fmt.Sprintf("source: {file: conversations.jsonl}\n    limit: %d", n), 1)
	w.write("evaluation.yaml", edit(file))
	data, err := os.ReadFile(filepath.Join(crmExample, "conversations.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	w.write("conversations.jsonl", string(data))
	return w
}

// TestConversationsInTheirOwnDatabases is the isolation proof, locally: 24
// conversations in flight at once (3 agents × concurrency 8), each resets
// and seeds database crm_<slot> and works in it (TRUNCATE included); every
// one sees exactly its own contacts. The same file with the slot taken out
// of the database's name (one shared database) clobbers: the test asserts
// that some conversations then see others' contacts, or lose their
// database mid-run.
func TestConversationsInTheirOwnDatabases(t *testing.T) {
	const n = 16
	w := crmWorkspace(t, n, func(s string) string { return s })
	r := w.run()
	if r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	recs, _ := readRecords(t, w.out)
	if len(recs) != 3*n {
		t.Fatalf("%d records, want %d\n%s", len(recs), 3*n, r)
	}
	for _, rec := range recs {
		if rec.Error != "" || rec.Scores["exact_match"] != 1 {
			t.Errorf("%s/%s saw %q (error %q)", rec.Model, rec.ID, rec.Output, rec.Error)
		}
	}
	// The service's output is kept beside the results; it is stopped.
	if b, err := os.ReadFile(filepath.Join(w.out, "services", "crm-db.log")); err != nil || !strings.Contains(string(b), "database system is ready") {
		t.Errorf("services/crm-db.log: %v\n%s", err, b)
	}
	if !strings.Contains(r.Stderr, "Running the setup hook") {
		t.Errorf("no word of the setup hook:\n%s", r.Stderr)
	}

	// One database: a conversation's reset drops it under the others. Their
	// slots' hooks then fail in turn; a short repairTimeout ends the run
	// rather than letting them retry for minutes.
	shared := crmWorkspace(t, n, func(s string) string {
		s = strings.ReplaceAll(s, "crm_$PROCTOR_SLOT", "crm_shared")
		return strings.Replace(s, "  hooks:\n", "  hooks:\n    repairTimeout: 10s\n", 1)
	})
	r = shared.run()
	if r.Code != 0 && r.Code != 1 {
		t.Fatalf("shared database: %s", r)
	}
	recs, _ = readRecords(t, shared.out)
	clobbered := 3*n - len(recs) // never finished: their model ended on a broken slot
	for _, rec := range recs {
		if rec.Error != "" || rec.Scores["exact_match"] != 1 {
			clobbered++
		}
	}
	t.Logf("one shared database: %d of %d conversations saw another's state, lost their database or never finished", clobbered, 3*n)
	if clobbered == 0 {
		t.Errorf("with one shared database no conversation was clobbered: the isolation test proves nothing\n%s", r)
	}
}
