package compile_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/compile"
	"github.com/proctor-dev/proctor/internal/evalfile"
	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/cache"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/ratelimit"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// Building blocks of specs, written at the indentation of spec's children.
const (
	inlineDataset = `datasets:
- name: qa
  source:
    inline:
    - {id: q1, input: "2+2?", expected: "4", topic: math}
    - {id: q2, input: "3+3?", expected: "6", topic: math}
`
	// localModel talks to an OpenAI-compatible server that needs no key. Nothing
	// listens there: Build must not call it.
	localModel = `models:
- name: local
  provider: openai
  model: m
  baseURL: http://127.0.0.1:9/v1
`
	exactMatch = `scoring:
- type: exact_match
`
)

// decode turns a spec body (YAML at the indentation of spec's children) into a
// defaulted, validated Evaluation, as proctor run would.
func decode(t *testing.T, spec string) *v1alpha1.Evaluation {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: proctor.dev/v1alpha1\nkind: Evaluation\nmetadata:\n  name: test\nspec:\n")
	for line := range strings.SplitSeq(strings.TrimRight(spec, "\n"), "\n") {
		b.WriteString("  " + line + "\n")
	}
	ev, err := evalfile.Decode("test.yaml", []byte(b.String()))
	if err != nil {
		t.Fatalf("decode spec: %v\n%s", err, b.String())
	}
	return ev
}

// newEnv returns an Env with fresh directories and an environment made of vars
// only (never the real one).
func newEnv(t *testing.T, vars map[string]string) compile.Env {
	t.Helper()
	return compile.Env{
		BaseDir:       t.TempDir(),
		DataDir:       t.TempDir(),
		CacheDir:      filepath.Join(t.TempDir(), "cache"),
		WorkspaceRoot: t.TempDir(),
		LookupEnv: func(name string) (string, bool) {
			v, ok := vars[name]
			return v, ok
		},
	}
}

func build(t *testing.T, spec string, env compile.Env) (*runner.Plan, error) {
	t.Helper()
	return compile.Build(t.Context(), decode(t, spec), env)
}

func mustBuild(t *testing.T, spec string, env compile.Env) *runner.Plan {
	t.Helper()
	plan, err := build(t, spec, env)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return plan
}

// wantError checks that err is not nil, starts with prefix, and contains each of want.
func wantError(t *testing.T, err error, prefix string, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("Build succeeded, want an error starting with %q", prefix)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		t.Errorf("error does not start with %q:\n%s", prefix, msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error does not contain %q:\n%s", w, msg)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error is not one line:\n%s", msg)
	}
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func gzipped(t *testing.T, data string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// sampleIDs reads a dataset of the plan through its Open function.
func sampleIDs(t *testing.T, d *runner.Dataset) []string {
	t.Helper()
	r, c, err := d.Open()
	if err != nil {
		t.Fatalf("dataset %s: Open: %v", d.Name, err)
	}
	defer c.Close()
	var ids []string
	for {
		s, err := r.Next()
		if errors.Is(err, io.EOF) {
			return ids
		}
		if err != nil {
			t.Fatalf("dataset %s: Next: %v", d.Name, err)
		}
		if s.Err != nil {
			ids = append(ids, "malformed:"+s.ID)
			continue
		}
		ids = append(ids, s.ID)
	}
}

// fileDataset is a datasets block for one file source, with extra dataset fields.
func fileDataset(file, extra string) string {
	s := "datasets:\n- name: data\n  source: {file: " + file + "}\n"
	for line := range strings.SplitSeq(strings.TrimSpace(extra), "\n") {
		if line != "" {
			s += "  " + line + "\n"
		}
	}
	return s
}

const (
	jsonlData = `{"id": "a", "input": "1+1?", "expected": "2"}
{"id": "b", "input": "2+2?", "expected": "4"}

{"id": "c", "input": "3+3?", "expected": "6"}
`
	jsonData = `[{"id": "a", "input": "x"}, {"id": "b", "input": "y"}]`
	csvData  = "id,input,expected\na,1+1?,2\nb,2+2?,4\nc,3+3?,6\nd,4+4?,8\n"
)

func TestFileDatasets(t *testing.T) {
	tests := []struct {
		name      string
		files     map[string][]byte
		file      string // the source's file:, relative to BaseDir
		extra     string // more dataset fields
		wantTotal int
		wantIDs   []string // every sample, ignoring limit
	}{
		{
			name:      "jsonl skips blank lines",
			files:     map[string][]byte{"data/q.jsonl": []byte(jsonlData)},
			file:      "data/q.jsonl",
			wantTotal: 3,
			wantIDs:   []string{"a", "b", "c"},
		},
		{
			name:      "json array",
			files:     map[string][]byte{"q.json": []byte(jsonData)},
			file:      "q.json",
			wantTotal: 2,
			wantIDs:   []string{"a", "b"},
		},
		{
			name:      "csv with header",
			files:     map[string][]byte{"q.csv": []byte(csvData)},
			file:      "q.csv",
			wantTotal: 4,
			wantIDs:   []string{"a", "b", "c", "d"},
		},
		{
			name:      "gzipped jsonl",
			files:     map[string][]byte{"q.jsonl.gz": gzipped(t, jsonlData)},
			file:      "q.jsonl.gz",
			wantTotal: 3,
			wantIDs:   []string{"a", "b", "c"},
		},
		{
			name:      "gzipped csv takes its format from the name under .gz",
			files:     map[string][]byte{"q.csv.gz": gzipped(t, csvData)},
			file:      "q.csv.gz",
			wantTotal: 4,
			wantIDs:   []string{"a", "b", "c", "d"},
		},
		{
			name:      "gzip recognised without a .gz name",
			files:     map[string][]byte{"q.jsonl": gzipped(t, jsonlData)},
			file:      "q.jsonl",
			wantTotal: 3,
			wantIDs:   []string{"a", "b", "c"},
		},
		{
			name:      "unknown extension is jsonl",
			files:     map[string][]byte{"q.txt": []byte(jsonlData)},
			file:      "q.txt",
			wantTotal: 3,
			wantIDs:   []string{"a", "b", "c"},
		},
		{
			name:      "explicit format beats the extension",
			files:     map[string][]byte{"q.txt": []byte(jsonData)},
			file:      "q.txt",
			extra:     "format: json",
			wantTotal: 2,
			wantIDs:   []string{"a", "b"},
		},
		{
			name:      "explicit csv on a .jsonl name",
			files:     map[string][]byte{"q.jsonl": []byte(csvData)},
			file:      "q.jsonl",
			extra:     "format: csv",
			wantTotal: 4,
			wantIDs:   []string{"a", "b", "c", "d"},
		},
		{
			name:      "limit below the count",
			files:     map[string][]byte{"q.csv": []byte(csvData)},
			file:      "q.csv",
			extra:     "limit: 2",
			wantTotal: 2,
			wantIDs:   []string{"a", "b", "c", "d"},
		},
		{
			name:      "limit above the count",
			files:     map[string][]byte{"q.csv": []byte(csvData)},
			file:      "q.csv",
			extra:     "limit: 100",
			wantTotal: 4,
			wantIDs:   []string{"a", "b", "c", "d"},
		},
		{
			name:      "field mapping",
			files:     map[string][]byte{"q.jsonl": []byte(`{"qid": "x1", "question": "?"}` + "\n")},
			file:      "q.jsonl",
			extra:     "fields: {id: qid, input: question}",
			wantTotal: 1,
			wantIDs:   []string{"x1"},
		},
		{
			name:      "empty file",
			files:     map[string][]byte{"q.jsonl": nil},
			file:      "q.jsonl",
			wantTotal: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t, nil)
			for name, data := range tt.files {
				writeFile(t, env.BaseDir, name, data)
			}
			plan := mustBuild(t, fileDataset(tt.file, tt.extra)+localModel+exactMatch, env)
			if len(plan.Datasets) != 1 {
				t.Fatalf("got %d datasets, want 1", len(plan.Datasets))
			}
			d := plan.Datasets[0]
			if d.Name != "data" {
				t.Errorf("Name = %q, want data", d.Name)
			}
			if d.Total != tt.wantTotal {
				t.Errorf("Total = %d, want %d", d.Total, tt.wantTotal)
			}
			if diff := cmp.Diff(tt.wantIDs, sampleIDs(t, d)); diff != "" {
				t.Errorf("samples read through Open (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFileDatasetAbsolutePath(t *testing.T) {
	env := newEnv(t, nil)
	abs := writeFile(t, t.TempDir(), "q.csv", []byte(csvData))
	plan := mustBuild(t, fileDataset(abs, "")+localModel, env)
	if got := plan.Datasets[0].Total; got != 4 {
		t.Errorf("Total = %d, want 4", got)
	}
}

func TestFileDatasetErrors(t *testing.T) {
	tests := []struct {
		name   string
		files  map[string][]byte
		spec   string
		prefix string
		want   []string
	}{
		{
			name:   "missing file",
			spec:   fileDataset("data/missing.jsonl", "") + localModel,
			prefix: "spec.datasets[0].source.file: open ",
			want:   []string{filepath.Join("data", "missing.jsonl"), "no such file or directory"},
		},
		{
			name:  "missing file in the second dataset",
			files: map[string][]byte{"a.jsonl": []byte(jsonlData)},
			spec: `datasets:
- name: a
  source: {file: a.jsonl}
- name: b
  source: {file: b.jsonl}
` + localModel,
			prefix: "spec.datasets[1].source.file: open ",
			want:   []string{"b.jsonl"},
		},
		{
			name:   "json that is not an array",
			files:  map[string][]byte{"q.json": []byte(`{"id": "a"}`)},
			spec:   fileDataset("q.json", "") + localModel,
			prefix: "spec.datasets[0].source.file: q.json: ",
			want:   []string{"not a JSON array"},
		},
		{
			name:   "csv with a duplicate column",
			files:  map[string][]byte{"q.csv": []byte("id,input,id\n1,2,3\n")},
			spec:   fileDataset("q.csv", "") + localModel,
			prefix: "spec.datasets[0].source.file: q.csv: csv header: duplicate column name",
		},
		{
			name:   "corrupt gzip",
			files:  map[string][]byte{"q.jsonl.gz": {0x1f, 0x8b, 0, 0}},
			spec:   fileDataset("q.jsonl.gz", "") + localModel,
			prefix: "spec.datasets[0].source.file: q.jsonl.gz: ",
		},
		{
			name:   "a directory",
			files:  map[string][]byte{"dir/x": nil},
			spec:   fileDataset("dir", "") + localModel,
			prefix: "spec.datasets[0].source.file: dir: ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t, nil)
			for name, data := range tt.files {
				writeFile(t, env.BaseDir, name, data)
			}
			_, err := build(t, tt.spec, env)
			wantError(t, err, tt.prefix, tt.want...)
		})
	}
}

func TestFileDatasetUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads files whatever their mode")
	}
	env := newEnv(t, nil)
	path := writeFile(t, env.BaseDir, "secret.jsonl", []byte(jsonlData))
	if err := os.Chmod(path, 0); err != nil {
		t.Fatal(err)
	}
	_, err := build(t, fileDataset("secret.jsonl", "")+localModel, env)
	wantError(t, err, "spec.datasets[0].source.file: open "+path, "permission denied")
}

func TestFileDatasetFingerprint(t *testing.T) {
	env := newEnv(t, nil)
	fingerprint := func(t *testing.T, content, extra string) string {
		t.Helper()
		writeFile(t, env.BaseDir, "q.jsonl", []byte(content))
		return mustBuild(t, fileDataset("q.jsonl", extra)+localModel, env).Datasets[0].Fingerprint
	}
	base := fingerprint(t, jsonlData, "")
	if base == "" {
		t.Fatal("empty Fingerprint")
	}
	if again := fingerprint(t, jsonlData, ""); again != base {
		t.Errorf("Fingerprint not stable across builds: %s, then %s", base, again)
	}

	same := map[string]string{
		"limit":          fingerprint(t, jsonlData, "limit: 1"),
		"another limit":  fingerprint(t, jsonlData, "limit: 2"),
		"explicit jsonl": fingerprint(t, jsonlData, "format: jsonl"),
	}
	for name, fp := range same {
		if fp != base {
			t.Errorf("%s changed the Fingerprint, want it unchanged", name)
		}
	}
	changed := map[string]string{
		"content":       fingerprint(t, strings.Replace(jsonlData, `"expected": "2"`, `"expected": "3"`, 1), ""),
		"a sample more": fingerprint(t, jsonlData+`{"id": "d", "input": "?"}`+"\n", ""),
		// Mappings must name fields the data has (Build checks), so these swap them.
		"input field": fingerprint(t, jsonlData, "fields: {input: expected}"),
		"id field":    fingerprint(t, jsonlData, "fields: {id: input}"),
		"expected":    fingerprint(t, jsonlData, "fields: {expected: input}"),
	}
	for name, fp := range changed {
		if fp == base {
			t.Errorf("changing the %s left the Fingerprint unchanged", name)
		}
	}

	// One line that is both a json array and a (malformed) jsonl record: the
	// same bytes read another way are other samples.
	const array = `[{"id": "a", "input": "x"}]` + "\n"
	if fingerprint(t, array, "") == fingerprint(t, array, "format: json") {
		t.Errorf("changing the format left the Fingerprint unchanged")
	}

	// The same bytes under another name are the same data.
	writeFile(t, env.BaseDir, "moved/other.jsonl", []byte(jsonlData))
	if fp := mustBuild(t, fileDataset("moved/other.jsonl", "")+localModel, env).Datasets[0].Fingerprint; fp != base {
		t.Errorf("moving the file changed the Fingerprint")
	}
}

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// dataServer serves files by path and counts the requests for each.
type dataServer struct {
	*httptest.Server
	hits map[string]*atomic.Int64
}

func newDataServer(t *testing.T, files map[string][]byte) *dataServer {
	t.Helper()
	s := &dataServer{hits: map[string]*atomic.Int64{}}
	for p := range files {
		s.hits[p] = new(atomic.Int64)
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		s.hits[r.URL.Path].Add(1)
		w.Write(data)
	}))
	t.Cleanup(s.Close)
	return s
}

func urlDataset(url, extra string) string {
	s := "datasets:\n- name: remote\n  source:\n    url: " + url + "\n"
	if extra != "" {
		s += "    " + extra + "\n"
	}
	return s
}

func TestURLDatasets(t *testing.T) {
	csvGz := gzipped(t, csvData)
	srv := newDataServer(t, map[string][]byte{
		"/q.jsonl":  []byte(jsonlData),
		"/q.csv.gz": csvGz,
		"/export":   []byte(jsonData),
	})
	sum := sha256Hex([]byte(jsonlData))
	tests := []struct {
		name      string
		path      string
		extra     string // more source fields
		format    string
		wantTotal int
		wantData  []byte
	}{
		{name: "jsonl", path: "/q.jsonl", wantTotal: 3, wantData: []byte(jsonlData)},
		{name: "lowercase sha256", path: "/q.jsonl", extra: "sha256: " + sum, wantTotal: 3, wantData: []byte(jsonlData)},
		{name: "uppercase sha256", path: "/q.jsonl", extra: "sha256: " + strings.ToUpper(sum), wantTotal: 3, wantData: []byte(jsonlData)},
		{name: "format from the URL's extension, gzipped", path: "/q.csv.gz", wantTotal: 4, wantData: csvGz},
		{name: "query ignored for the format", path: "/q.csv.gz?token=abc", wantTotal: 4, wantData: csvGz},
		{name: "explicit format", path: "/export", format: "json", wantTotal: 2, wantData: []byte(jsonData)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t, nil)
			spec := urlDataset(srv.URL+tt.path, tt.extra)
			if tt.format != "" {
				spec += "  format: " + tt.format + "\n"
			}
			plan := mustBuild(t, spec+localModel, env)
			if got := plan.Datasets[0].Total; got != tt.wantTotal {
				t.Errorf("Total = %d, want %d", got, tt.wantTotal)
			}
			if got := len(sampleIDs(t, plan.Datasets[0])); got != tt.wantTotal {
				t.Errorf("Open read %d samples, want %d", got, tt.wantTotal)
			}
			entries, err := os.ReadDir(env.DataDir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 {
				t.Fatalf("DataDir holds %d entries, want the one download", len(entries))
			}
			got, err := os.ReadFile(filepath.Join(env.DataDir, entries[0].Name()))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.wantData) {
				t.Errorf("downloaded file holds %q, want %q", got, tt.wantData)
			}
		})
	}
}

func TestURLDatasetDownloadedOnce(t *testing.T) {
	srv := newDataServer(t, map[string][]byte{"/q.jsonl": []byte(jsonlData)})
	before := srv.hits["/q.jsonl"].Load()
	mustBuild(t, urlDataset(srv.URL+"/q.jsonl", "")+localModel, newEnv(t, nil))
	if n := srv.hits["/q.jsonl"].Load() - before; n != 1 {
		t.Errorf("Build fetched the URL %d times, want once", n)
	}
}

func TestURLDatasetErrors(t *testing.T) {
	srv := newDataServer(t, map[string][]byte{
		"/q.jsonl":  []byte(jsonlData),
		"/bad.json": []byte(`{"not": "an array"}`),
	})
	sum := sha256Hex([]byte(jsonlData))
	wrong := sha256Hex([]byte("something else"))
	tests := []struct {
		name   string
		spec   string
		prefix string
		want   []string
		// cleaned: no download is left in DataDir.
		cleaned bool
	}{
		{
			name:    "404",
			cleaned: true,
			spec:    urlDataset(srv.URL+"/missing.jsonl", ""),
			prefix:  "spec.datasets[0].source.url: ",
			want:    []string{"GET " + srv.URL + "/missing.jsonl", "404 Not Found"},
		},
		{
			name:    "sha256 mismatch",
			cleaned: true,
			spec:    urlDataset(srv.URL+"/q.jsonl", "sha256: "+wrong),
			prefix:  "spec.datasets[0].source.sha256: ",
			want:    []string{srv.URL + "/q.jsonl", "SHA-256 " + sum, "want " + wrong},
		},
		{
			name:   "data that does not parse",
			spec:   urlDataset(srv.URL+"/bad.json", ""),
			prefix: "spec.datasets[0].source.url: " + srv.URL + "/bad.json: ",
			want:   []string{"not a JSON array"},
		},
		{
			name:   "nobody listening",
			spec:   urlDataset("http://127.0.0.1:9/q.jsonl", ""),
			prefix: "spec.datasets[0].source.url: ",
			want:   []string{"127.0.0.1:9"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t, nil)
			_, err := build(t, tt.spec+localModel, env)
			wantError(t, err, tt.prefix, tt.want...)
			if entries, _ := os.ReadDir(env.DataDir); tt.cleaned && len(entries) != 0 {
				t.Errorf("DataDir keeps %d entries after a failed download, want none", len(entries))
			}
		})
	}
}

func TestInlineDataset(t *testing.T) {
	tests := []struct {
		name      string
		extra     string
		wantTotal int
	}{
		{name: "all items", wantTotal: 2},
		{name: "limit", extra: "  limit: 1\n", wantTotal: 1},
		{name: "limit above the count", extra: "  limit: 5\n", wantTotal: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := mustBuild(t, inlineDataset+tt.extra+localModel, newEnv(t, nil))
			d := plan.Datasets[0]
			if d.Total != tt.wantTotal {
				t.Errorf("Total = %d, want %d", d.Total, tt.wantTotal)
			}
			if diff := cmp.Diff([]string{"q1", "q2"}, sampleIDs(t, d)); diff != "" {
				t.Errorf("samples (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("fingerprint", func(t *testing.T) {
		fp := func(spec string) string { return mustBuild(t, spec+localModel, newEnv(t, nil)).Datasets[0].Fingerprint }
		base := fp(inlineDataset)
		if fp(inlineDataset+"  limit: 1\n") != base {
			t.Error("limit changed an inline dataset's Fingerprint")
		}
		if fp(strings.Replace(inlineDataset, `expected: "4"`, `expected: "5"`, 1)) == base {
			t.Error("changing an item left the Fingerprint unchanged")
		}
		if fp(inlineDataset+"  fields: {input: topic}\n") == base {
			t.Error("changing the mapping left the Fingerprint unchanged")
		}
	})
}

func TestClusterSources(t *testing.T) {
	sources := []struct {
		name, source, field, key string
	}{
		{"configMap", "configMap: {name: evals, key: q.csv}", "spec.datasets[0].source.configMap", "q.csv"},
		{"pvc", "pvc: {claimName: evals, path: sets/q.csv}", "spec.datasets[0].source.pvc", "sets/q.csv"},
	}
	for _, src := range sources {
		spec := "datasets:\n- name: shared\n  source: {" + src.source + "}\n" + localModel
		t.Run(src.name+" without ResolveSource", func(t *testing.T) {
			_, err := build(t, spec, newEnv(t, nil))
			wantError(t, err, src.field+": only works in a cluster", "file:", "url:")
		})
		t.Run(src.name+" resolved to a file", func(t *testing.T) {
			env := newEnv(t, nil)
			// Named .data: the format must come from the source's key or path.
			file := writeFile(t, t.TempDir(), "resolved.data", []byte(csvData))
			var got *v1alpha1.Dataset
			env.ResolveSource = func(ds *v1alpha1.Dataset) (string, error) {
				got = ds
				return file, nil
			}
			plan := mustBuild(t, spec, env)
			if got == nil || got.Name != "shared" {
				t.Errorf("ResolveSource got dataset %+v, want the one named shared", got)
			}
			if plan.Datasets[0].Total != 4 {
				t.Errorf("Total = %d, want the csv's 4 records", plan.Datasets[0].Total)
			}
		})
		t.Run(src.name+" resolve error", func(t *testing.T) {
			env := newEnv(t, nil)
			env.ResolveSource = func(*v1alpha1.Dataset) (string, error) {
				return "", errors.New("configmap evals not found")
			}
			_, err := build(t, spec, env)
			wantError(t, err, src.field+": configmap evals not found")
		})
	}
}

func TestAPIKeys(t *testing.T) {
	const key = "sk-test-0123456789abcdef"
	tests := []struct {
		name        string
		model       string
		vars        map[string]string
		wantSecrets []string
		// wantErr, when set, is the error's prefix; wantIn are more substrings.
		wantErr string
		wantIn  []string
	}{
		{
			name:    "openai default endpoint, key unset",
			model:   "{name: gpt, provider: openai, model: gpt-4.1-mini}",
			wantErr: "spec.models[0].apiKey.env: environment variable OPENAI_API_KEY is not set",
			wantIn:  []string{`model "gpt"`, "baseURL"},
		},
		{
			name:    "openai default endpoint, key empty",
			model:   "{name: gpt, provider: openai, model: gpt-4.1-mini}",
			vars:    map[string]string{"OPENAI_API_KEY": ""},
			wantErr: "spec.models[0].apiKey.env: environment variable OPENAI_API_KEY is not set",
		},
		{
			name:        "openai default endpoint, key set",
			model:       "{name: gpt, provider: openai, model: gpt-4.1-mini}",
			vars:        map[string]string{"OPENAI_API_KEY": key},
			wantSecrets: []string{key},
		},
		{
			name:    "openai default endpoint named explicitly",
			model:   "{name: gpt, provider: openai, model: gpt-4.1-mini, baseURL: 'https://api.openai.com/v1'}",
			wantErr: "spec.models[0].apiKey.env: environment variable OPENAI_API_KEY is not set",
		},
		{
			name:  "custom baseURL needs no key",
			model: "{name: gpt, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1'}",
			// Even when the default variable is set, a keyless server gets no key.
			vars: map[string]string{"OPENAI_API_KEY": key},
		},
		{
			name:    "custom baseURL, named env unset",
			model:   "{name: gpt, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1', apiKey: {env: MY_KEY}}",
			vars:    map[string]string{"OPENAI_API_KEY": key},
			wantErr: "spec.models[0].apiKey.env: environment variable MY_KEY is not set",
		},
		{
			name:        "custom baseURL, named env set",
			model:       "{name: gpt, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1', apiKey: {env: MY_KEY}}",
			vars:        map[string]string{"MY_KEY": key},
			wantSecrets: []string{key},
		},
		{
			// echo "$KEY" > file; export KEY=$(cat file) keeps no newline, but
			// KEY="$(cat file)\n", .env files and Secrets --from-file do.
			name:        "key with a trailing newline is trimmed",
			model:       "{name: gpt, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1', apiKey: {env: MY_KEY}}",
			vars:        map[string]string{"MY_KEY": " " + key + "\r\n"},
			wantSecrets: []string{key},
		},
		{
			name:    "key of white space only",
			model:   "{name: gpt, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1', apiKey: {env: MY_KEY}}",
			vars:    map[string]string{"MY_KEY": "\n"},
			wantErr: "spec.models[0].apiKey.env: environment variable MY_KEY is not set",
		},
		{
			name:    "key with a newline inside",
			model:   "{name: gpt, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1', apiKey: {env: MY_KEY}}",
			vars:    map[string]string{"MY_KEY": key + "\n" + key},
			wantErr: "spec.models[0].apiKey.env: environment variable MY_KEY holds a space or control character",
		},
		{
			name:    "custom baseURL, empty apiKey takes the default variable",
			model:   "{name: gpt, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1', apiKey: {}}",
			wantErr: "spec.models[0].apiKey.env: environment variable OPENAI_API_KEY is not set",
		},
		{
			name:    "anthropic default endpoint, key unset",
			model:   "{name: claude, provider: anthropic, model: claude-sonnet-4}",
			vars:    map[string]string{"OPENAI_API_KEY": key},
			wantErr: "spec.models[0].apiKey.env: environment variable ANTHROPIC_API_KEY is not set",
		},
		{
			name:        "anthropic default endpoint, key set",
			model:       "{name: claude, provider: anthropic, model: claude-sonnet-4}",
			vars:        map[string]string{"ANTHROPIC_API_KEY": key},
			wantSecrets: []string{key},
		},
		{
			name:  "anthropic custom baseURL needs no key",
			model: "{name: claude, provider: anthropic, model: claude-sonnet-4, baseURL: 'http://127.0.0.1:9'}",
		},
		{
			name:    "agent apiKey env unset",
			model:   "{name: coder, provider: agent, apiKey: {env: CODER_KEY}, agent: {command: [coder]}}",
			wantErr: "spec.models[0].apiKey.env: environment variable CODER_KEY is not set",
		},
		{
			name:        "agent apiKey env set",
			model:       "{name: coder, provider: agent, apiKey: {env: CODER_KEY}, agent: {command: [coder]}}",
			vars:        map[string]string{"CODER_KEY": key},
			wantSecrets: []string{key},
		},
		{
			name:  "agent without apiKey",
			model: "{name: coder, provider: agent, agent: {command: [coder]}}",
			vars:  map[string]string{"OPENAI_API_KEY": key},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := build(t, inlineDataset+"models:\n- "+tt.model+"\n", newEnv(t, tt.vars))
			if tt.wantErr != "" {
				wantError(t, err, tt.wantErr, tt.wantIn...)
				return
			}
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if diff := cmp.Diff(tt.wantSecrets, plan.Secrets); diff != "" {
				t.Errorf("Secrets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAPIKeyDefaultEndpointWithTrailingSlash(t *testing.T) {
	_, err := build(t, inlineDataset+"models:\n- {name: gpt, provider: openai, model: m, baseURL: 'https://api.openai.com/v1/'}\n", newEnv(t, nil))
	wantError(t, err, "spec.models[0].apiKey.env: environment variable OPENAI_API_KEY is not set")
}

// TestKeysStayOutOfFingerprints checks that a key is in Secrets but never in a
// fingerprint, and that changing the key changes no fingerprint.
func TestKeysStayOutOfFingerprints(t *testing.T) {
	spec := inlineDataset + `models:
- {name: gpt, provider: openai, model: gpt-4.1-mini}
- {name: claude, provider: anthropic, model: claude-sonnet-4}
- name: coder
  provider: agent
  apiKey: {env: CODER_KEY}
  agent:
    command: [coder, "{{ .Prompt }}"]
    env: [{name: GH_TOKEN}]
scoring:
- type: judge
  judge: {model: claude}
`
	fingerprints := func(t *testing.T, suffix string) (*runner.Plan, []string, []string) {
		vars := map[string]string{
			"OPENAI_API_KEY":    "sk-openai-" + suffix,
			"ANTHROPIC_API_KEY": "sk-ant-" + suffix,
			"CODER_KEY":         "sk-coder-" + suffix,
			"GH_TOKEN":          "ghp_token_" + suffix,
		}
		plan := mustBuild(t, spec, newEnv(t, vars))
		var fps []string
		for _, m := range plan.Models {
			fps = append(fps, m.Fingerprint)
			for _, d := range plan.Datasets {
				fps = append(fps, plan.CheckpointFingerprint(m, d))
			}
		}
		for _, d := range plan.Datasets {
			fps = append(fps, d.Fingerprint)
		}
		var secrets []string
		for _, v := range vars {
			secrets = append(secrets, v)
		}
		return plan, fps, secrets
	}
	plan, first, secrets := fingerprints(t, "AAAAAAAAAAAAAAAAAAAAAAAA")
	for _, s := range secrets {
		if !slices.Contains(plan.Secrets, s) {
			t.Errorf("Secrets %q lacks %q", plan.Secrets, s)
		}
		for _, fp := range first {
			if strings.Contains(fp, s) {
				t.Errorf("fingerprint %q contains the secret %q", fp, s)
			}
		}
	}
	_, second, _ := fingerprints(t, "BBBBBBBBBBBBBBBBBBBBBBBB")
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("changing the keys changed fingerprints (-first +second):\n%s", diff)
	}
}

func TestAgentModels(t *testing.T) {
	const longToken = "ghp_0123456789"
	tests := []struct {
		name        string
		agent       string // the agent block's fields, in flow style
		vars        map[string]string
		wantSecrets []string
		wantTimeout time.Duration
		wantErr     string
		wantIn      []string
	}{
		{
			name:  "declared values",
			agent: "command: [coder], env: [{name: MODE, value: fast}, {name: LEVEL, value: '3'}]",
		},
		{
			name:        "inherited values, long ones secret",
			agent:       "command: [coder], env: [{name: GH_TOKEN}, {name: SHORT}]",
			vars:        map[string]string{"GH_TOKEN": longToken, "SHORT": "1234567"},
			wantSecrets: []string{longToken},
		},
		{
			name:    "inherited value missing",
			agent:   "command: [coder], env: [{name: GH_TOKEN}]",
			wantErr: "spec.models[0].agent.env[0]: GH_TOKEN has no value and is not set in proctor's environment",
		},
		{
			name:    "second entry missing",
			agent:   "command: [coder], env: [{name: MODE, value: fast}, {name: GH_TOKEN}]",
			wantErr: "spec.models[0].agent.env[1]: GH_TOKEN has no value",
		},
		{
			name:    "valueFrom",
			agent:   "command: [coder], env: [{name: GH_TOKEN, valueFrom: {secretKeyRef: {name: gh, key: token}}}]",
			vars:    map[string]string{"GH_TOKEN": longToken},
			wantErr: "spec.models[0].agent.env[0].valueFrom: only works in a cluster",
			wantIn:  []string{"GH_TOKEN"},
		},
		{
			name:        "timeout",
			agent:       "command: [coder], timeout: 90s",
			wantTimeout: 90 * time.Second,
		},
		{
			name:    "bad command template",
			agent:   "command: [coder, '{{ .Prompt']",
			wantErr: "spec.models[0].agent.command[1]: ",
		},
		{
			name:    "bad file template",
			agent:   "command: [coder], files: {task.md: '{{ if }}'}",
			wantErr: `spec.models[0].agent.files["task.md"]: `,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := inlineDataset + "models:\n- {name: coder, provider: agent, agent: {" + tt.agent + "}}\n"
			plan, err := build(t, spec, newEnv(t, tt.vars))
			if tt.wantErr != "" {
				wantError(t, err, tt.wantErr, tt.wantIn...)
				return
			}
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			m := plan.Models[0]
			if !m.Agent {
				t.Error("Agent = false, want true")
			}
			if m.Timeout != tt.wantTimeout {
				t.Errorf("Timeout = %v, want %v", m.Timeout, tt.wantTimeout)
			}
			if diff := cmp.Diff(tt.wantSecrets, plan.Secrets); diff != "" {
				t.Errorf("Secrets (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAgentEnvironment runs the compiled agent once, with env(1) as the agent, to
// see the exact environment Build gave it.
func TestAgentEnvironment(t *testing.T) {
	envBin, err := exec.LookPath("env")
	if err != nil {
		t.Skip("no env program:", err)
	}
	spec := inlineDataset + `models:
- name: coder
  provider: agent
  apiKey: {env: CODER_KEY}
  agent:
    command: [` + envBin + `]
    env:
    - {name: MODE, value: fast}
    - {name: GH_TOKEN}
`
	vars := map[string]string{
		"PATH":        "/usr/bin:/bin",
		"HOME":        "/home/tester",
		"CODER_KEY":   "sk-coder-123456",
		"GH_TOKEN":    "ghp_abcdefgh",
		"UNDECLARED":  "must not leak",
		"AWS_SECRET":  "must not leak either",
		"OTHER_THING": "nope",
	}
	plan := mustBuild(t, spec, newEnv(t, vars))
	resp, err := plan.Models[0].Provider.Complete(t.Context(), &provider.Request{Prompt: "hi", SampleID: "q1"})
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got := map[string]string{}
	for line := range strings.SplitSeq(resp.Text, "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	delete(got, "PROCTOR_WORKSPACE") // a fresh directory each time
	want := map[string]string{
		"PATH":              "/usr/bin:/bin",
		"HOME":              "/home/tester",
		"CODER_KEY":         "sk-coder-123456",
		"MODE":              "fast",
		"GH_TOKEN":          "ghp_abcdefgh",
		"PROCTOR_SAMPLE_ID": "q1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agent environment (-want +got):\n%s", diff)
	}
}

func TestModelSettings(t *testing.T) {
	type model struct {
		Name        string
		Concurrency int
		Limits      ratelimit.Limits
		MaxTokens   int
		JudgeOnly   bool
		Agent       bool
	}
	tests := []struct {
		name        string
		spec        string
		concurrency int // Env.Concurrency
		want        []model
	}{
		{
			name: "default concurrency",
			spec: localModel,
			want: []model{{Name: "local", Concurrency: 10}},
		},
		{
			name: "spec concurrency",
			spec: localModel + "concurrency: 7\n",
			want: []model{{Name: "local", Concurrency: 7}},
		},
		{
			name: "model concurrency beats spec concurrency",
			spec: "concurrency: 7\nmodels:\n- {name: a, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1', concurrency: 3}\n" +
				"- {name: b, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1'}\n",
			want: []model{{Name: "a", Concurrency: 3}, {Name: "b", Concurrency: 7}},
		},
		{
			name: "Env concurrency beats both",
			spec: "concurrency: 7\nmodels:\n- {name: a, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1', concurrency: 3}\n" +
				"- {name: b, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1'}\n",
			concurrency: 2,
			want:        []model{{Name: "a", Concurrency: 2}, {Name: "b", Concurrency: 2}},
		},
		{
			name: "rate limits",
			spec: "models:\n- {name: a, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1', " +
				"rateLimit: {requestsPerMinute: 60, inputTokensPerMinute: 10000, outputTokensPerMinute: 2000}}\n",
			want: []model{{Name: "a", Concurrency: 10, Limits: ratelimit.Limits{RequestsPerMinute: 60, InputTokensPerMinute: 10000, OutputTokensPerMinute: 2000}}},
		},
		{
			name: "max tokens: anthropic default, explicit values, none for openai",
			spec: `models:
- {name: a, provider: anthropic, model: c, baseURL: 'http://127.0.0.1:9'}
- {name: b, provider: anthropic, model: c, baseURL: 'http://127.0.0.1:9', parameters: {maxTokens: 200}}
- {name: c, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1'}
- {name: d, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1', parameters: {maxTokens: 50}}
`,
			want: []model{
				{Name: "a", Concurrency: 10, MaxTokens: 1024},
				{Name: "b", Concurrency: 10, MaxTokens: 200},
				{Name: "c", Concurrency: 10},
				{Name: "d", Concurrency: 10, MaxTokens: 50},
			},
		},
		{
			name: "judge-only models",
			spec: `models:
- {name: subject, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1'}
- {name: judge, provider: anthropic, model: c, baseURL: 'http://127.0.0.1:9'}
- {name: coder, provider: agent, agent: {command: [coder]}}
scoring:
- {type: judge, judge: {model: judge}}
`,
			want: []model{
				{Name: "subject", Concurrency: 10},
				{Name: "judge", Concurrency: 10, MaxTokens: 1024, JudgeOnly: true},
				{Name: "coder", Concurrency: 10, Agent: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t, nil)
			env.Concurrency = tt.concurrency
			plan := mustBuild(t, inlineDataset+tt.spec, env)
			var got []model
			for _, m := range plan.Models {
				if m.Provider == nil {
					t.Errorf("model %s has no Provider", m.Name)
				}
				got = append(got, model{m.Name, m.Concurrency, m.Limits, m.MaxTokens, m.JudgeOnly, m.Agent})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("models (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlanSettings(t *testing.T) {
	plan := mustBuild(t, inlineDataset+localModel+`retry: {maxAttempts: 5, initialBackoff: 250ms, maxBackoff: 10s}
timeoutPerSample: 45s
scoring:
- {type: exact_match, name: em, normalize: [trim, lowercase]}
- {type: numeric, tolerance: 0.5}
- {type: tool_call}
`, newEnv(t, nil))
	if got := plan.Retry.MaxAttempts; got != 5 {
		t.Errorf("Retry.MaxAttempts = %d, want 5", got)
	}
	if plan.Retry.Initial != 250*time.Millisecond || plan.Retry.Max != 10*time.Second {
		t.Errorf("Retry backoff = %v..%v, want 250ms..10s", plan.Retry.Initial, plan.Retry.Max)
	}
	if plan.Timeout != 45*time.Second {
		t.Errorf("Timeout = %v, want 45s", plan.Timeout)
	}
	if diff := cmp.Diff([]string{"em", "numeric", "tool_call"}, plan.MetricNames()); diff != "" {
		t.Errorf("MetricNames (-want +got):\n%s", diff)
	}
	if got := plan.Scorers[0].Config.Normalize; !slices.Equal(got, []string{"trim", "lowercase"}) {
		t.Errorf("Normalize = %q, want [trim lowercase]", got)
	}
	if got := plan.Scorers[1].Config.Tolerance; got != 0.5 {
		t.Errorf("Tolerance = %v, want 0.5", got)
	}
	if !plan.Scorers[2].Config.CheckArguments {
		t.Error("tool_call CheckArguments = false, want the default true")
	}
}

func TestPreflight(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string][]byte
		spec    string
		wantErr string // prefix; "" means Build succeeds
		wantIn  []string
	}{
		{
			name:    "prompt names a field the first sample lacks",
			spec:    inlineDataset + localModel + "prompt: {template: 'Q: {{ .Sample.question }}'}\n",
			wantErr: `spec.prompt.template: dataset "qa" sample "q1" (line 1): `,
			wantIn:  []string{`"question"`},
		},
		{
			name:    "system prompt names a missing field",
			spec:    inlineDataset + localModel + "prompt: {system: 'You know {{ .Sample.subject }}.'}\n",
			wantErr: `spec.prompt.system: dataset "qa" sample "q1" (line 1): `,
			wantIn:  []string{`"subject"`},
		},
		{
			name:    "prompt that does not parse",
			spec:    inlineDataset + localModel + "prompt: {template: '{{ .Input '}\n",
			wantErr: "spec.prompt.template: ",
		},
		{
			name: "prompt naming an existing field",
			spec: inlineDataset + localModel + "prompt: {template: '{{ .Sample.topic }}: {{ .Input }}'}\n",
		},
		{
			name: "malformed first line is skipped, the next sample is checked",
			files: map[string][]byte{"q.jsonl": []byte(`{"id": "bad", "question": ` + "\n" +
				`{"id": "q2", "input": "no question here"}` + "\n")},
			spec:    fileDataset("q.jsonl", "") + localModel + "prompt: {template: '{{ .Sample.question }}'}\n",
			wantErr: `spec.prompt.template: dataset "data" sample "q2" (line 2): `,
			wantIn:  []string{`"question"`},
		},
		{
			name: "malformed first line is skipped, the next sample passes",
			files: map[string][]byte{"q.jsonl": []byte("not json\n" +
				`{"id": "q2", "question": "?"}` + "\n")},
			spec: fileDataset("q.jsonl", "") + localModel + "prompt: {template: '{{ .Sample.question }}'}\n",
		},
		{
			name:  "line numbers count blank lines",
			files: map[string][]byte{"q.jsonl": []byte("\n\n" + `{"id": "q3"}` + "\n")},
			spec:  fileDataset("q.jsonl", "") + localModel + "prompt: {template: '{{ .Sample.question }}'}\n",
			// The first record is on line 3.
			wantErr: `spec.prompt.template: dataset "data" sample "q3" (line 3): `,
		},
		{
			name:  "every sample malformed: nothing to check",
			files: map[string][]byte{"q.jsonl": []byte("not json\n[1, 2]\n")},
			spec:  fileDataset("q.jsonl", "") + localModel + "prompt: {template: '{{ .Sample.question }}'}\n",
		},
		{
			name:  "only the first sample is checked",
			files: map[string][]byte{"q.jsonl": []byte(`{"id": "q1", "question": "?"}` + "\n" + `{"id": "q2"}` + "\n")},
			spec:  fileDataset("q.jsonl", "") + localModel + "prompt: {template: '{{ .Sample.question }}'}\n",
		},
		{
			name: "second dataset checked too",
			files: map[string][]byte{
				"a.jsonl": []byte(`{"id": "a1", "question": "?"}` + "\n"),
				"b.jsonl": []byte(`{"id": "b1", "q": "?"}` + "\n"),
			},
			spec: `datasets:
- {name: first, source: {file: a.jsonl}}
- {name: second, source: {file: b.jsonl}}
` + localModel + "prompt: {template: '{{ .Sample.question }}'}\n",
			wantErr: `spec.prompt.template: dataset "second" sample "b1" (line 1): `,
		},
		{
			name: "csv header names the fields",
			files: map[string][]byte{
				"q.csv": []byte("id,question\nc1,why?\n"),
			},
			spec: fileDataset("q.csv", "") + localModel + "prompt: {template: '{{ .Sample.question }}'}\n",
		},
		{
			name: "agent command names a missing sample field",
			spec: inlineDataset + localModel + `- name: coder
  provider: agent
  agent: {command: [coder, --repo, "{{ .Sample.repo }}"]}
`,
			wantErr: `spec.models[1].agent: dataset "qa" sample "q1" (line 1): `,
			wantIn:  []string{"command[2]", `"repo"`},
		},
		{
			name: "agent file names a missing sample field",
			spec: inlineDataset + localModel + `- name: coder
  provider: agent
  agent: {command: [coder], files: {task.md: "{{ .Sample.task }}"}}
`,
			wantErr: `spec.models[1].agent: dataset "qa" sample "q1" (line 1): `,
			wantIn:  []string{"task.md", `"task"`},
		},
		{
			name: "agent stdin names a missing sample field",
			spec: inlineDataset + localModel + `- name: coder
  provider: agent
  agent: {command: [coder], stdin: "{{ .Sample.stdin }}"}
`,
			wantErr: `spec.models[1].agent: dataset "qa" sample "q1" (line 1): `,
		},
		{
			name: "agent templates over existing fields",
			spec: inlineDataset + localModel + `- name: coder
  provider: agent
  agent: {command: [coder, "{{ .Prompt }}", "{{ .Sample.topic }}", "{{ .ID }}", "{{ .Workspace }}"]}
`,
		},
		{
			name: "judge rubric with an unknown top-level field",
			spec: inlineDataset + localModel + `- {name: judge, provider: anthropic, model: c, baseURL: 'http://127.0.0.1:9'}
scoring:
- type: exact_match
- type: judge
  judge: {model: judge, rubric: "Grade {{ .Ouptut }} against {{ .Expected }}"}
`,
			wantErr: "spec.scoring[1]: rubric: unknown field .Ouptut",
		},
		{
			name: "judge rubric that does not parse",
			spec: inlineDataset + localModel + `- {name: judge, provider: anthropic, model: c, baseURL: 'http://127.0.0.1:9'}
scoring:
- type: judge
  judge: {model: judge, rubric: "{{ .Output "}
`,
			wantErr: "spec.scoring[0]: rubric: ",
		},
		{
			name: "judge rubric over known fields",
			spec: inlineDataset + localModel + `- {name: judge, provider: anthropic, model: c, baseURL: 'http://127.0.0.1:9'}
scoring:
- type: judge
  judge: {model: judge, rubric: "{{ .Prompt }} {{ .Input }} {{ .Output }} {{ .Expected }} {{ .Sample.topic }}"}
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t, nil)
			for name, data := range tt.files {
				writeFile(t, env.BaseDir, name, data)
			}
			plan, err := build(t, tt.spec, env)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Build: %v", err)
				}
				if plan == nil {
					t.Fatal("Build returned a nil plan")
				}
				return
			}
			wantError(t, err, tt.wantErr, tt.wantIn...)
		})
	}
}

func TestPreflightJudgeRubricSampleField(t *testing.T) {
	spec := inlineDataset + localModel + `- {name: judge, provider: anthropic, model: c, baseURL: 'http://127.0.0.1:9'}
scoring:
- type: judge
  judge: {model: judge, rubric: "{{ .Output }} vs {{ .Sample.reference }}"}
`
	_, err := build(t, spec, newEnv(t, nil))
	wantError(t, err, "spec.scoring[0]", `"reference"`)
}

func TestPreflightErrorWithLineBreakInSampleID(t *testing.T) {
	spec := "datasets:\n- name: qa\n  source:\n    inline:\n    - {id: \"a\\nb\", input: x}\n" +
		localModel + "prompt: {template: '{{ .Sample.question }}'}\n"
	_, err := build(t, spec, newEnv(t, nil))
	wantError(t, err, `spec.prompt.template: dataset "qa" sample`)
}

func TestCache(t *testing.T) {
	t.Run("enabled", func(t *testing.T) {
		env := newEnv(t, nil)
		plan := mustBuild(t, inlineDataset+localModel+"cache: {enabled: true}\n", env)
		if plan.Cache == nil {
			t.Fatal("Cache is nil, want a cache")
		}
		if dc, ok := plan.Cache.(*cache.Cache); !ok || dc.Dir() != env.CacheDir {
			t.Errorf("Cache = %#v, want a directory cache in %q", plan.Cache, env.CacheDir)
		}
		if fi, err := os.Stat(env.CacheDir); err != nil || !fi.IsDir() {
			t.Errorf("cache directory not created: %v", err)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		env := newEnv(t, nil)
		for _, spec := range []string{"", "cache: {enabled: false}\n", "cache: {}\n"} {
			plan := mustBuild(t, inlineDataset+localModel+spec, env)
			if plan.Cache != nil {
				t.Errorf("spec %q: Cache = %v, want nil", spec, plan.Cache)
			}
		}
		if _, err := os.Stat(env.CacheDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cache directory created although the cache is off (stat: %v)", err)
		}
	})
	t.Run("unusable directory", func(t *testing.T) {
		env := newEnv(t, nil)
		env.CacheDir = writeFile(t, t.TempDir(), "a-file", nil)
		_, err := build(t, inlineDataset+localModel+"cache: {enabled: true}\n", env)
		wantError(t, err, "spec.cache: ")
	})
}

func TestCheckpointFingerprint(t *testing.T) {
	const base = `datasets:
- name: qa
  source:
    inline:
    - {id: q1, input: "2+2?", expected: "4"}
models:
- {name: subject, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1', parameters: {temperature: 0.2}}
- {name: judge, provider: anthropic, model: c, baseURL: 'http://127.0.0.1:9'}
prompt: {template: 'Q: {{ .Input }}'}
scoring:
- {type: exact_match}
- {type: judge, judge: {model: judge}}
`
	fingerprint := func(t *testing.T, spec string, env compile.Env) string {
		t.Helper()
		plan := mustBuild(t, spec, env)
		m := plan.Model("subject")
		if m == nil {
			t.Fatal("no model subject in the plan")
		}
		return plan.CheckpointFingerprint(m, plan.Datasets[0])
	}
	want := fingerprint(t, base, newEnv(t, nil))

	replace := func(old, repl string) string {
		if !strings.Contains(base, old) {
			t.Fatalf("base spec has no %q", old)
		}
		return strings.Replace(base, old, repl, 1)
	}
	withEnv := func(f func(*compile.Env)) compile.Env {
		env := newEnv(t, nil)
		f(&env)
		return env
	}
	tests := []struct {
		name    string
		spec    string
		env     compile.Env
		changed bool
	}{
		{name: "same spec", spec: base},
		{name: "spec concurrency", spec: base + "concurrency: 3\n"},
		{name: "model concurrency", spec: replace("parameters: {temperature: 0.2}}", "parameters: {temperature: 0.2}, concurrency: 2}")},
		{name: "Env concurrency", spec: base, env: withEnv(func(e *compile.Env) { e.Concurrency = 1 })},
		{name: "rate limit", spec: replace("parameters: {temperature: 0.2}}", "parameters: {temperature: 0.2}, rateLimit: {requestsPerMinute: 10}}")},
		{name: "retry", spec: base + "retry: {maxAttempts: 9}\n"},
		{name: "timeout", spec: base + "timeoutPerSample: 10s\n"},
		{name: "cache", spec: base + "cache: {enabled: true}\n"},
		{name: "dataset limit", spec: replace(`name: qa`, "name: qa\n  limit: 1")},
		{name: "temperature written another way", spec: replace("temperature: 0.2", `temperature: 0.20`)},

		{name: "prompt template", spec: replace("Q: {{ .Input }}", "Question: {{ .Input }}"), changed: true},
		{name: "system prompt", spec: replace("prompt: {", "prompt: {system: Be brief., "), changed: true},
		{name: "scorer added", spec: base + "- {type: contains}\n", changed: true},
		{name: "scorer normalization", spec: replace("{type: exact_match}", "{type: exact_match, normalize: [trim]}"), changed: true},
		{name: "scorer renamed", spec: replace("{type: exact_match}", "{type: exact_match, name: em}"), changed: true},
		{name: "judge rubric", spec: replace("judge: {model: judge}", "judge: {model: judge, rubric: 'Grade {{ .Output }}'}"), changed: true},
		{name: "judge model's parameters", spec: replace("model: c,", "model: c, parameters: {temperature: 0},"), changed: true},
		{name: "temperature", spec: replace("temperature: 0.2", "temperature: 0.3"), changed: true},
		{name: "maxTokens", spec: replace("temperature: 0.2", "temperature: 0.2, maxTokens: 100"), changed: true},
		{name: "model identifier", spec: replace("model: m,", "model: m2,"), changed: true},
		{name: "baseURL", spec: replace("'http://127.0.0.1:9/v1'", "'http://127.0.0.1:10/v1'"), changed: true},
		{name: "headers", spec: replace("parameters: {temperature: 0.2}}", "parameters: {temperature: 0.2}, headers: {X-Org: a}}"), changed: true},
		{name: "data", spec: replace(`expected: "4"`, `expected: "four"`), changed: true},
		{name: "field mapping", spec: replace(`name: qa`, "name: qa\n  fields: {expected: input}"), changed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := tt.env
			if env.LookupEnv == nil {
				env = newEnv(t, nil)
			}
			got := fingerprint(t, tt.spec, env)
			if changed := got != want; changed != tt.changed {
				t.Errorf("fingerprint changed = %v, want %v\nspec:\n%s", changed, tt.changed, tt.spec)
			}
		})
	}

	t.Run("differs per model and per dataset", func(t *testing.T) {
		spec := replace("models:", `- name: other
  source:
    inline:
    - {id: q1, input: "2+2?", expected: "4"}
    - {id: q2, input: "3+3?", expected: "6"}
models:
- {name: second, provider: openai, model: m2, baseURL: 'http://127.0.0.1:9/v1'}`)
		plan := mustBuild(t, spec, newEnv(t, nil))
		seen := map[string]string{}
		for _, m := range plan.Subjects() {
			for _, d := range plan.Datasets {
				fp := plan.CheckpointFingerprint(m, d)
				pair := m.Name + "/" + d.Name
				if other, dup := seen[fp]; dup {
					t.Errorf("%s and %s share the fingerprint %s", pair, other, fp)
				}
				seen[fp] = pair
			}
		}
		if len(seen) != 4 {
			t.Errorf("got %d distinct fingerprints, want 4 (2 subjects x 2 datasets)", len(seen))
		}
	})
}

// TestBuildCallsNoModel builds plans, good and bad, against a fake model server
// and checks that none of them sent it a request: every problem must be found
// before any model call.
func TestBuildCallsNoModel(t *testing.T) {
	fake := fakellm.New(fakellm.Config{APIKey: "sk-fake-key-1234"})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	models := fmt.Sprintf(`models:
- {name: gpt, provider: openai, model: m, baseURL: '%[1]s/v1', apiKey: {env: FAKE_KEY}}
- {name: claude, provider: anthropic, model: c, baseURL: '%[1]s', apiKey: {env: FAKE_KEY}}
scoring:
- {type: judge, judge: {model: claude}}
`, srv.URL)
	vars := map[string]string{"FAKE_KEY": "sk-fake-key-1234"}
	specs := map[string]string{
		"good":            inlineDataset + models,
		"missing field":   inlineDataset + models + "prompt: {template: '{{ .Sample.nope }}'}\n",
		"missing file":    fileDataset("nope.jsonl", "") + models,
		"bad rubric":      inlineDataset + strings.Replace(models, "model: claude}", "model: claude, rubric: '{{ .Nope }}'}", 1),
		"missing api key": inlineDataset + strings.Replace(models, "FAKE_KEY", "UNSET_KEY", 1),
	}
	for name, spec := range specs {
		_, err := build(t, spec, newEnv(t, vars))
		if (err == nil) != (name == "good") {
			t.Errorf("%s: Build error = %v", name, err)
		}
	}
	if st := fake.Stats(); st.Requests != 0 {
		t.Fatalf("Build sent %d requests to the model server, want none", st.Requests)
	}

	// The plan does reach the server, with the key from the environment.
	plan := mustBuild(t, specs["good"], newEnv(t, vars))
	for _, m := range plan.Models {
		resp, err := m.Provider.Complete(t.Context(), &provider.Request{
			Messages: []provider.Message{{Role: provider.RoleUser, Content: "REPLY: pong"}},
		})
		if err != nil {
			t.Errorf("model %s: Complete: %v", m.Name, err)
		} else if resp.Text != "pong" {
			t.Errorf("model %s: answer %q, want pong", m.Name, resp.Text)
		}
	}
}

// TestClusterModelsSubset: a runner pod has the keys of its own model and of the
// judges only; compiling just those must not ask for the others' keys.
func TestClusterModelsSubset(t *testing.T) {
	spec := `datasets:
- name: d
  source: {inline: [{input: "What is 2+2?", expected: "4"}]}
models:
- {name: a, provider: openai, model: gpt, baseURL: "http://a.invalid/v1", apiKey: {env: K, secretKeyRef: {name: sa, key: k}}}
- {name: b, provider: anthropic, model: claude, baseURL: "http://b.invalid", apiKey: {env: K, secretKeyRef: {name: sb, key: k}}}
- {name: j, provider: openai, model: judge, baseURL: "http://j.invalid/v1", apiKey: {env: K, secretKeyRef: {name: sj, key: k}}}
scoring:
- {type: judge, judge: {model: j}}
`
	// The pod of model b holds b's and the judge's keys, not a's. A Secret made
	// with --from-file usually ends in a newline, which is not part of the key.
	env := newEnv(t, map[string]string{cluster.APIKeyEnv("b"): "kb\n", cluster.APIKeyEnv("j"): "kj"})
	env.Cluster = true
	t.Run("all models", func(t *testing.T) {
		_, err := build(t, spec, env)
		wantError(t, err, "spec.models[0].apiKey.secretKeyRef: the key of Secret sa is empty or missing")
	})
	t.Run("the pod's models", func(t *testing.T) {
		env := env
		env.Models = []string{"b", "j"}
		plan := mustBuild(t, spec, env)
		var names []string
		for _, m := range plan.Models {
			names = append(names, fmt.Sprintf("%s judgeOnly=%v", m.Name, m.JudgeOnly))
		}
		if diff := cmp.Diff([]string{"b judgeOnly=false", "j judgeOnly=true"}, names); diff != "" {
			t.Errorf("compiled models (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"kb", "kj"}, plan.Secrets); diff != "" {
			t.Errorf("plan secrets (-want +got):\n%s", diff)
		}
	})
}

// TestHeadersThatCannotBeSent: a header net/http refuses would fail every call
// (retried, then every sample an error); it is refused before any.
func TestHeadersThatCannotBeSent(t *testing.T) {
	tests := []struct {
		name    string
		headers string
		wantErr string // prefix; "" means accepted
	}{
		{name: "valid", headers: `{X-Title: "My eval", HTTP-Referer: "https://example.org"}`},
		{name: "newline in a value", headers: `{X-Title: "a\nb"}`, wantErr: "spec.models[0].headers: X-Title: the value holds a newline"},
		{name: "space in a name", headers: `{"X Title": a}`, wantErr: `spec.models[0].headers: "X Title" is not a valid header name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model := "models:\n- {name: m, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1', headers: " + tt.headers + "}\n"
			_, err := build(t, inlineDataset+model, newEnv(t, nil))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Build: %v", err)
				}
				return
			}
			wantError(t, err, tt.wantErr)
		})
	}
}

// TestEndpointKeyUnset: a model calling through a ModelEndpoint whose key
// variable is unset is told to fix the endpoint's apiKey, which the user
// wrote, not the model's, which they did not.
func TestEndpointKeyUnset(t *testing.T) {
	f, err := evalfile.DecodeFile("f.yaml", []byte(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: test}
spec:
  datasets:
  - name: d
    source:
      inline:
      - {id: q1, input: "2+2?", expected: "4"}
  models:
  - {name: gpt, model: m, endpointRef: {name: team-key}}
---
apiVersion: proctor.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: team-key}
spec: {provider: openai, apiKey: {env: TEAM_KEY}}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = compile.Build(t.Context(), f.Evaluation, compile.Env{LookupEnv: func(string) (string, bool) { return "", false }})
	wantError(t, err, "ModelEndpoint team-key: spec.apiKey.env: environment variable TEAM_KEY is not set",
		`ModelEndpoint "team-key" (which model "gpt" calls through) needs an API key`)
}

// TestInvalidUTF8IsAWarning: data holding bytes that are not UTF-8 runs
// (U+FFFD in their place, as a JSON request must), with a warning that says
// how many records and where the first is.
func TestInvalidUTF8IsAWarning(t *testing.T) {
	env := newEnv(t, nil)
	writeFile(t, env.BaseDir, "qa.jsonl", []byte("{\"id\":\"a\",\"input\":\"ok\"}\n{\"id\":\"b\",\"input\":\"caf\xe9\"}\n"))
	plan := mustBuild(t, `
  datasets:
  - name: qa
    source: {file: qa.jsonl}
  models:
  - {name: m, provider: openai, model: m, baseURL: "http://127.0.0.1:9/v1"}
`, env)
	want := []string{`spec.datasets[0]: dataset "qa": 1 record(s) hold bytes that are not UTF-8 (the first at line 2): ` +
		"they are sent, scored and recorded with U+FFFD in their place; convert the file to UTF-8 to send them as meant"}
	if diff := cmp.Diff(want, plan.Datasets[0].Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

// TestNumericAnswersHint: exact_match on numeric expected answers without
// the number normalizer is said before the run; with it, or on text
// answers, nothing is said.
func TestNumericAnswersHint(t *testing.T) {
	for _, tc := range []struct {
		name, items, normalize string
		want                   []string
	}{
		{"numbers as text", `[{id: a, input: "1+1?", expected: "2"}, {id: b, input: "2+2?", expected: 4}]`, "[trim]", []string{
			`spec.scoring[0]: the expected answers of dataset "d" are numbers, which exact_match compares as text: an answer "42.0" scores 0 against "42"; ` +
				"add number to its normalize to compare them as numbers (or use type: numeric, with a tolerance)"}},
		{"number normalizer", `[{id: a, input: "1+1?", expected: "2"}]`, "[trim, number]", nil},
		{"text answers", `[{id: a, input: "capital?", expected: "Paris"}, {id: b, input: "1+1?", expected: "2"}]`, "[trim]", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := mustBuild(t, `
  datasets:
  - name: d
    source: {inline: `+tc.items+`}
  models:
  - {name: m, provider: openai, model: m, baseURL: "http://127.0.0.1:9/v1"}
  scoring:
  - {type: exact_match, normalize: `+tc.normalize+`}
`, newEnv(t, nil))
			if diff := cmp.Diff(tc.want, plan.Datasets[0].Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}
