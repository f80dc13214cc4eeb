package source

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

func inline(n int) []runtime.RawExtension {
	out := make([]runtime.RawExtension, n)
	for i := range out {
		out[i] = runtime.RawExtension{Raw: []byte(`{"input":"q","expected":"a"}`)}
	}
	return out
}

func gz(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestCountInMemory(t *testing.T) {
	cm := func(key string) v1alpha1.DatasetSource {
		return v1alpha1.DatasetSource{ConfigMap: &v1alpha1.ConfigMapSource{Name: "qa", Key: key}}
	}
	jsonl := "{\"input\":\"a\"}\n{\"input\":\"b\"}\n\n{\"input\":\"c\"}\n"
	cases := []struct {
		name    string
		d       v1alpha1.Dataset
		data    []byte
		want    int
		wantOK  bool
		wantErr string
	}{
		{name: "inline", d: v1alpha1.Dataset{Source: v1alpha1.DatasetSource{Inline: inline(4)}}, want: 4, wantOK: true},
		{name: "inline, limited", d: v1alpha1.Dataset{Limit: 2, Source: v1alpha1.DatasetSource{Inline: inline(4)}}, want: 2, wantOK: true},
		{name: "inline, limit above the count", d: v1alpha1.Dataset{Limit: 10, Source: v1alpha1.DatasetSource{Inline: inline(4)}}, want: 4, wantOK: true},
		{name: "configMap jsonl (blank lines skipped)", d: v1alpha1.Dataset{Source: cm("data.jsonl")}, data: []byte(jsonl), want: 3, wantOK: true},
		{name: "configMap jsonl, gzipped", d: v1alpha1.Dataset{Source: cm("data.jsonl.gz")}, data: gz(t, jsonl), want: 3, wantOK: true},
		{name: "configMap jsonl, limited", d: v1alpha1.Dataset{Limit: 1, Source: cm("data.jsonl")}, data: []byte(jsonl), want: 1, wantOK: true},
		{name: "configMap csv", d: v1alpha1.Dataset{Source: cm("data.csv")}, data: []byte("id,input\n1,a\n2,\"b,c\"\n"), want: 2, wantOK: true},
		{name: "configMap csv, header only", d: v1alpha1.Dataset{Source: cm("data.csv")}, data: []byte("id,input\n"), want: 0, wantOK: true},
		{name: "configMap json array", d: v1alpha1.Dataset{Source: cm("data.json")}, data: []byte(`[{"input":"a"},{"input":"b"}]`), want: 2, wantOK: true},
		{name: "format overrides the key's extension", d: v1alpha1.Dataset{Format: v1alpha1.FormatCSV, Source: cm("data.txt")}, data: []byte("input\na\nb\nc\n"), want: 3, wantOK: true},
		{name: "configMap, empty", d: v1alpha1.Dataset{Source: cm("data.jsonl")}, data: nil, want: 0, wantOK: true},
		{
			name: "configMap, malformed json", d: v1alpha1.Dataset{Source: cm("data.json")}, data: []byte(`[{"input":"a"}, {oops}]`),
			wantOK: true, wantErr: "ConfigMap qa key data.json: element 2: invalid JSON",
		},
		{
			name: "configMap, bad csv header", d: v1alpha1.Dataset{Source: cm("data.csv")}, data: []byte("id,id\n1,2\n"),
			wantOK: true, wantErr: "ConfigMap qa key data.csv: csv header: duplicate column name",
		},
		{name: "url: a pod counts", d: v1alpha1.Dataset{Source: v1alpha1.DatasetSource{URL: "https://x/d.jsonl"}}, wantOK: false},
		{name: "pvc: a pod counts", d: v1alpha1.Dataset{Source: v1alpha1.DatasetSource{PVC: &v1alpha1.PVCSource{ClaimName: "c", Path: "d.jsonl"}}}, wantOK: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, ok, err := CountInMemory(&tc.d, tc.data)
			if ok != tc.wantOK {
				t.Errorf("ok = %v, want %v", ok, tc.wantOK)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("error = %v", err)
			}
			if n != tc.want {
				t.Errorf("n = %d, want %d", n, tc.want)
			}
		})
	}
}
