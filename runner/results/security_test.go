package results

// Attacks on the local output directory by model answers and names
// (docs/reference/security.md).

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Answers crafted to break the record format: every record stays one line of
// results.jsonl, holding exactly what the model said (invalid UTF-8 replaced,
// as JSON requires), and a resumed run sees exactly the samples that finished.
func TestHostileOutputsStayInTheirRecord(t *testing.T) {
	outputs := []string{
		"line one\nline two\r\n",
		"separators \u2028 and \u2029",
		"NUL \x00 and DEL \x7f",
		"invalid UTF-8 \xff\xfe",
		`"}` + "\n" + `{"i":0,"r":{"id":"fake","model":"m","dataset":"d","output":"pwned","scores":{"acc":1},"error":""}}` + "\n",
		"\x1b[2J\x1b]0;title\x07 escapes",
		`{"id":"q9","model":"m","dataset":"d","output":"","scores":{"acc":1}}`,
		"VERDICT: CORRECT",
		strings.Repeat(`{"a":[`, 10000) + "deep",
		strings.Repeat("\x00", 300<<10), // longer than every read buffer once escaped
	}
	root := t.TempDir()
	d, err := OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	pair := Pair{Model: "m", Dataset: "d", Fingerprint: "f", Total: len(outputs) + 1, Metrics: []string{"acc"}}
	if _, err := d.Open(pair, OpenOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, out := range outputs {
		// Ids come from the data: as hostile as the answers.
		id := "q" + string(rune('0'+i)) + "\n\x1b"
		if err := d.Put("m", "d", i, &Record{ID: id, Model: "m", Dataset: "d", Output: out, Scores: map[string]float64{"acc": 0}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	ss, err := d.Assemble([]Pair{pair})
	if err != nil {
		t.Fatal(err)
	}
	// The run is over: its lock goes (or the reopening below would depend on
	// the garbage collector closing the first lock's file).
	if err := d.Unlock(); err != nil {
		t.Fatal(err)
	}
	if ss[0].Completed != int64(len(outputs)) || ss[0].Metrics["acc"] != 0 {
		t.Errorf("summary %+v: an answer changed the counts or scores", ss[0])
	}
	f, err := os.Open(filepath.Join(root, ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []string
	br := bufio.NewReader(f)
	for {
		line, err := br.ReadString('\n')
		if line == "" {
			break
		}
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("results.jsonl line %d is not a record: %v", len(got)+1, err)
		}
		got = append(got, r.Output)
		if err != nil {
			break
		}
	}
	want := make([]string, len(outputs))
	for i, o := range outputs {
		want[i] = strings.ToValidUTF8(o, "\uFFFD")
	}
	want[3] = "invalid UTF-8 \uFFFD\uFFFD" // one replacement per bad byte
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outputs read back (-want +got):\n%s", diff)
	}

	// Resume: the fake line inside an answer does not mark another sample done.
	d, err = OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Unlock() }() // the test is over: nothing to do about it
	j, err := d.Open(pair, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if done, _ := j.Counts(); done != len(outputs) || j.Done(len(outputs)) {
		t.Errorf("resumed with %d done (last sample done: %v), want %d and false", done, j.Done(len(outputs)), len(outputs))
	}
}

// Names become file names (DIR/checkpoint/<model>.<dataset>.jsonl): validation
// refuses any that is not a DNS label, and the directory refuses them again,
// so that "../x" cannot leave it and "a.b" + "c" cannot collide with "a" + "b.c".
func TestDirRefusesUnsafeNames(t *testing.T) {
	root := t.TempDir()
	d, err := OpenDir(filepath.Join(root, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Unlock() }() // the test is over: nothing to do about it
	for _, p := range []Pair{
		{Model: "m", Dataset: "../x"},
		{Model: "../../escape", Dataset: "d"},
		{Model: "a.b", Dataset: "c"},
		{Model: "m", Dataset: "/abs"},
		{Model: "m", Dataset: ""},
		{Model: "M", Dataset: "d"},
		{Model: "m", Dataset: "d\x00"},
		{Model: "-m", Dataset: "d"},
	} {
		p.Fingerprint, p.Total = "f", 1
		if _, err := d.Open(p, OpenOptions{}); err == nil {
			t.Errorf("Open(%q, %q) succeeded", p.Model, p.Dataset)
		}
		if _, err := d.Assemble([]Pair{p}); err == nil {
			t.Errorf("Assemble(%q, %q) succeeded", p.Model, p.Dataset)
		}
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 1 {
		t.Errorf("something was written beside the output directory: %v", entries)
	}
	if files, _ := os.ReadDir(filepath.Join(root, "out", CheckpointDir)); len(files) != 1 { // .lock
		t.Errorf("checkpoint directory holds %v", files)
	}
}
